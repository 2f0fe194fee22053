"""Waiting for a message without polling: ``LISTEN`` on the prefix's channel.

Every operation that makes a message claimable now (``publish``, ``nack`` with no delay,
``release``...) sends ``pg_notify`` on :func:`channel` in its transaction: a notification means
a committed message. A transport's ``wait_for_messages(timeout)`` waits up to ``timeout`` on one
listening connection of its own, outside the pool: :class:`Listener` (threads) and
:class:`AsyncListener` (tasks) differ only in how they wait. A waiter whose connection broke
connects again every :data:`RECONNECT` seconds (a failover's new primary is heard as soon as it
takes connections); one behind a pooler (:class:`~harel_sa.postgres.wire.ServerSession`)
sleeps out its timeout: the worker then falls back to its poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import threading
import time
from typing import Any

import psycopg

from harel_sa.postgres.compiled import channel
from harel_sa.postgres.wire import ServerSession
from harel_sa.schema import Names

#: How often a waiter whose listening connection broke tries to connect again.
RECONNECT = 0.25


def heard(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Read what the socket holds; whether a notification was among it (all are consumed)."""
    pgconn = conn.pgconn
    pgconn.consume_input()
    found = False
    while pgconn.notifies() is not None:
        found = True
    return found


async def readable(fd: int, timeout: float) -> None:
    """Return once ``fd`` is readable or ``timeout`` has passed (the event loop's select)."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def mark() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, mark)
    try:
        await asyncio.wait_for(ready, timeout)
    except TimeoutError:
        pass
    finally:
        loop.remove_reader(fd)


class Listener:
    """One listening connection for a sync transport; safe to share between threads (one
    waits on the socket at a time, and a notification it hears ends the waits that were
    queued behind it too)."""

    def __init__(self, conninfo: str, names: Names, server: ServerSession) -> None:
        self._conninfo, self._listen = conninfo, f"LISTEN {channel(names)}"
        self._server = server  # while not ``pinned`` (a pooler between), no LISTEN
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()
        self._heard = 0  # notifications heard so far: a waiter's wake-up since it began

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        seen = self._heard
        if not self._lock.acquire(timeout=timeout):
            return self._heard != seen
        try:
            if self._heard != seen:
                return True
            got = self._wait(max(0.0, deadline - time.monotonic()))
            self._heard += got
            return got
        finally:
            self._lock.release()

    def _wait(self, timeout: float) -> bool:
        """Whether a notification came within ``timeout``. A fresh connection counts as one (a
        spurious wake): anything published while none listened went unheard. A connection that
        broke or cannot be made is closed and the timeout slept out, to connect again next time.
        Behind a pooler (not ``pinned``) a waiter never listens: a ``LISTEN`` may register on
        whichever server connection ran it, which then serves other clients (PgBouncer's
        ``pool_mode = transaction``): nothing would be heard, and they would get the
        notifications."""
        if not self._server.pinned:
            self.close()
            time.sleep(timeout)
            return False
        deadline = time.monotonic() + timeout
        try:
            if self._conn is None:
                return self._connect()
            # The socket may turn readable with something else than a notification: go on.
            while not heard(self._conn):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                select.select([self._conn.pgconn.socket], [], [], left)
            return True
        except (psycopg.Error, OSError):
            self.close()
        # Broken, or not made: again every RECONNECT seconds until the deadline.
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(RECONNECT, left))
            try:
                return self._connect()
            except (psycopg.Error, OSError):
                self.close()
        return False

    def _connect(self) -> bool:
        """A new listening connection; ``True``: a wake, as what was published while none
        listened went unheard."""
        self._conn = psycopg.connect(self._conninfo, autocommit=True)
        self._conn.execute(self._listen)
        return True

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                conn.close()


class AsyncListener:
    """:class:`Listener` for an async transport: the same waits, awaited on the event loop."""

    def __init__(self, conninfo: str, names: Names, server: ServerSession) -> None:
        self._conninfo, self._listen = conninfo, f"LISTEN {channel(names)}"
        self._server = server
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lock = asyncio.Lock()
        self._heard = 0

    async def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        seen = self._heard
        try:
            if self._lock.locked():  # (wait_for with no time left never starts a free acquire)
                await asyncio.wait_for(self._lock.acquire(), timeout)
            else:
                await self._lock.acquire()
        except TimeoutError:
            return self._heard != seen
        try:
            if self._heard != seen:
                return True
            got = await self._wait(max(0.0, deadline - time.monotonic()))
            self._heard += got
            return got
        finally:
            self._lock.release()

    async def _wait(self, timeout: float) -> bool:
        if not self._server.pinned:
            await self.close()
            await asyncio.sleep(timeout)
            return False
        deadline = time.monotonic() + timeout
        try:
            if self._conn is None:
                return await self._connect()
            while not heard(self._conn):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                await readable(self._conn.pgconn.socket, left)
            return True
        except (psycopg.Error, OSError):
            await self.close()
        while (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(RECONNECT, left))
            try:
                return await self._connect()
            except (psycopg.Error, OSError):
                await self.close()
        return False

    async def _connect(self) -> bool:
        self._conn = await psycopg.AsyncConnection.connect(self._conninfo, autocommit=True)
        await self._conn.execute(self._listen)
        return True

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()

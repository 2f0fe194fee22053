"""The connections a transport keeps between calls.

On a one-row claim or ack, ``psycopg_pool``'s ``getconn``/``putconn`` cost the client about as
much CPU as the statement's own round trip. So a transport keeps the connections it has used on
a stack of its own (:class:`Sessions`): a call pops the most recently used one, or takes one
from the pool when the stack is empty, and pushes it back when it ended healthy. The pool still
makes, configures and counts the connections (never more than ``pool_size`` in all), waits out
``busy_timeout`` when every one is in use, and takes back every connection that is not healthy.
A stack is safe to share between threads (``list.pop`` and ``list.append`` are atomic) and
between coroutines.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from psycopg import pq

C = TypeVar("C")

#: Seconds a connection stays out of the pool before it goes back at the end of a call: so the
#: pool still recycles every connection now and then (its ``max_lifetime``).
RECYCLE = 60.0
_IDLE = pq.TransactionStatus.IDLE


@dataclass(slots=True)
class Session(Generic[C]):
    """A connection taken from the pool, and when it goes back (``monotonic`` seconds)."""

    connection: C
    returns_at: float


class Sessions(Generic[C]):
    """The stack of healthy sessions a transport keeps between its calls."""

    def __init__(self) -> None:
        self._stack: list[Session[C]] = []
        self._closed = False
        #: One item per caller waiting at the pool (appends and pops are atomic; ``+= 1`` is
        #: not, between threads).
        self._waiting: list[None] = []

    def take(self) -> Session[C] | None:
        """The most recently kept session, or ``None``: take a connection from the pool."""
        try:
            return self._stack.pop()
        except IndexError:
            return None

    @contextmanager
    def waiting(self) -> Iterator[Session[C] | None]:
        """Enlist as waiting at the pool for the block's length; yields a session kept
        meanwhile (take it instead of waiting), or ``None``: wait at the pool. A connection kept
        on the stack would never reach a caller waiting at the pool: so a call that ends while
        anyone waits gives its connection to the pool (:meth:`keep`). Either the waiter's second
        look finds the connection, or the ending call sees the waiter."""
        self._waiting.append(None)
        try:
            yield self.take()
        finally:
            self._waiting.pop()

    @staticmethod
    def new(connection: C) -> Session[C]:
        """A session on a connection just taken from the pool."""
        return Session(connection, time.monotonic() + RECYCLE)

    def keep(self, session: Session[C]) -> list[Session[C]]:
        """Keep ``session`` for the next call if it is healthy (open, not broken, outside any
        transaction, and younger than :data:`RECYCLE`); the sessions whose connections the
        caller must now give back to the pool (``session`` when it is not healthy, every one
        kept when the transport closed meanwhile, a spare one while anyone waits)."""
        conn: Any = session.connection
        # libpq reports a closed or broken connection's transaction status as UNKNOWN, so one
        # look at it covers psycopg's ``closed`` and ``broken`` too (two properties less).
        if conn.pgconn.transaction_status != _IDLE or time.monotonic() > session.returns_at:
            return [session]
        self._stack.append(session)
        # The flags are read after the push; close() and waiting() set theirs before they look
        # at the stack: whichever runs last sees the other.
        if self._closed:
            return self.close()
        if self._waiting:
            spare = self.take()
            return _NONE if spare is None else [spare]
        return _NONE

    def close(self) -> list[Session[C]]:
        """Keep nothing more; the sessions whose connections go back to the pool now."""
        self._closed = True
        taken: list[Session[C]] = []
        while (session := self.take()) is not None:
            taken.append(session)
        return taken


_NONE: list[Any] = []  # keep()'s usual answer, never changed

"""``SqliteTransport``: the queue over one sqlite3 connection, safe to share between threads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from harel_sa import validate
from harel_sa.errors import TransportClosedError
from harel_sa.events import E, Event
from harel_sa.schema import DEFAULT_PREFIX
from harel_sa.seam import Binder, Bound, Options, Synchronous
from harel_sa.seam import synchronous as check_synchronous
from harel_sa.sqlite import startup
from harel_sa.sqlite.backend import SqliteBackend, sqlite_call
from harel_sa.sqlite.connection import SyncConnection, same_file
from harel_sa.transports import Transport

T = TypeVar("T")


class SqliteTransport(Transport[E]):
    """A durable queue in a SQLite file: FIFO per group, one message in flight per group,
    round-robin across groups (oldest-claimed first), a priority floor and routing keys.

    Built as the harel engine builds its own ``SqliteTransport``: ``path`` first (default
    ``":memory:"``, a private queue for this instance), then ``clock``. ``path`` is a file path,
    a ``sqlite:///`` URL, or an :class:`~sqlalchemy.Engine` the caller owns (no hooks are
    installed on it). ``create_schema=True`` creates or upgrades the schema
    at open; ``False`` writes nothing, and every call raises :class:`~harel_sa.SchemaError`
    while the schema is not at head (harel's rule: the transport is built, its first use
    fails). Every "now" comes from ``clock``. ``synchronous="NORMAL"`` trades the last commits on
    power loss (never on a process crash) for much cheaper commits. Calls from several threads
    are serialized: each operation is one whole transaction.
    """

    def __init__(
        self,
        path: object = ":memory:",
        clock: Callable[[], float] = time.time,
        *,
        prefix: str = DEFAULT_PREFIX,
        create_schema: bool = True,
        busy_timeout: float = 5.0,
        event_type: type[E] = Event,  # type: ignore[assignment]
        synchronous: Synchronous = "FULL",
    ) -> None:
        options = Options(prefix, clock, busy_timeout, event_type)
        self._synchronous = durability = check_synchronous(synchronous)
        self._binder = Binder(options, SqliteBackend(options.names, options.clock))
        self._lock = threading.Lock()
        self._db: SyncConnection | None = SyncConnection.open(
            path, options.busy_timeout, create_schema
        )
        self._where = where = self._db.where
        try:
            # Not at head: nothing written, and a SchemaError from each call until it is.
            self._unchecked = startup.at_open(
                self._db.raw, options.names, options.busy_timeout, durability, create_schema, where
            )
        except BaseException:
            self.close()
            raise

    def _same_database(self, identity: tuple[Any, ...]) -> bool:
        return same_file(identity[0], self._db.watch.path if self._db is not None else None)

    def _run(self, call: Bound[T]) -> T:
        db = self._db
        if db is not None and db.watch.blocked:
            db.watch.before()  # before the lock: one a parent's thread held at fork() stays held
        with self._lock:
            if self._db is None:
                raise TransportClosedError("the transport is closed")
            if self._unchecked is not None:  # SchemaError until the schema is at head
                self._db.watch.run(self._unchecked, self._db.raw)
                self._unchecked = None
            return self._db.watch.run(sqlite_call(call), self._db.raw)

    def wait_for_messages(self, timeout: float) -> bool:
        """Sleep ``timeout`` seconds and return ``False``: a SQLite file tells no other process
        when a message arrives, so a worker polls (PostgreSQL's transport waits for a
        notification here). The same signature as :meth:`harel_sa.PostgresTransport.
        wait_for_messages`, so a worker calls it whatever its backend."""
        time.sleep(validate.seconds("timeout", timeout, allow_zero=True))
        return False

    def close(self) -> None:
        """Close the connection; later calls raise :class:`~harel_sa.TransportClosedError`."""
        db = self._db
        if db is not None and db.watch.forked:  # the parent's lock and connection: let go
            self._db = None
            db.close()
            return
        with self._lock:
            db, self._db = self._db, None
        if db is not None:
            db.close()

"""SQLite's transaction brackets and its driver errors as harel_sa's typed ones.

:class:`immediate_transaction` is the bracket of every write (``BEGIN IMMEDIATE`` ...
``COMMIT``, so writers from every process serialize, rolled back on any exception);
:func:`read_transaction` the bracket of the admin reads (one snapshot). Both leave driver
errors as :class:`~harel_sa.StorageError`\\ s, typed by SQLite's result code
(:func:`translate`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

from harel_sa.errors import (
    BusyError,
    DatabaseReplacedError,
    DiskIOError,
    HarelSAError,
    NotADatabaseError,
    ReadOnlyError,
    StorageError,
    StorageFullError,
)

#: Typed errors by SQLite's extended result code first, then by its primary code (the low
#: byte): a full disk at open (``SQLITE_IOERR_SHMSIZE``) or a lock is never "not a database".
_BY_EXTENDED: dict[int, type[HarelSAError]] = {
    4874: StorageFullError,  # SQLITE_IOERR_SHMSIZE: the -shm file cannot grow (a full disk)
    1032: DatabaseReplacedError,  # SQLITE_READONLY_DBMOVED: the file was moved or deleted
}
_BY_PRIMARY: dict[int, type[HarelSAError]] = {
    5: BusyError,  # SQLITE_BUSY
    6: BusyError,  # SQLITE_LOCKED
    8: ReadOnlyError,  # SQLITE_READONLY
    10: DiskIOError,  # SQLITE_IOERR
    13: StorageFullError,  # SQLITE_FULL
    26: NotADatabaseError,  # SQLITE_NOTADB
}


def translate(exc: sqlite3.DatabaseError) -> HarelSAError:
    """The typed error for a driver error, by SQLite's extended result code, then its primary
    one; the message keeps the driver's text and the extended code's name."""
    code = getattr(exc, "sqlite_errorcode", 0) or 0
    kind = _BY_EXTENDED.get(code) or _BY_PRIMARY.get(code & 0xFF, StorageError)
    return kind(f"{exc} ({getattr(exc, 'sqlite_errorname', None) or 'SQLITE_ERROR'})")


@contextmanager
def storage_errors() -> Iterator[None]:
    """Turn the driver's errors into harel_sa's typed :class:`~harel_sa.StorageError`\\ s."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        raise translate(exc) from exc


class immediate_transaction:
    """One write transaction: ``BEGIN IMMEDIATE`` ... ``COMMIT``, rolled back on any exception
    (``BaseException`` included); driver errors leave as typed :class:`StorageError`\\ s.

    A class rather than a generator context manager: it runs twice per message on the hot path.
    """

    __slots__ = ("conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.DatabaseError as exc:
            raise translate(exc) from exc
        return self.conn

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            try:
                self.conn.execute("COMMIT")
                return
            except BaseException as failed:
                self._rollback()
                if isinstance(failed, sqlite3.DatabaseError):
                    raise translate(failed) from failed
                raise
        self._rollback()
        if isinstance(exc, sqlite3.DatabaseError):
            raise translate(exc) from exc

    def _rollback(self) -> None:
        # SQLite may already have rolled back (SQLITE_FULL can); a second ROLLBACK errors.
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")


@contextmanager
def read_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One read transaction: every query inside sees the same snapshot."""
    with storage_errors():
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")

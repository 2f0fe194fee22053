"""SQLite's transaction brackets and its driver errors as harel_sa's typed ones.

:func:`immediate_transaction` is the bracket of every write (``BEGIN IMMEDIATE`` ...
``COMMIT``, so writers from every process serialize, rolled back on any exception);
:func:`read_transaction` the bracket of the admin reads (one snapshot). :func:`translate`
types driver errors as :class:`~harel_sa.StorageError`\\ s by SQLite's result code:
``read_transaction`` and :func:`storage_errors` do it themselves, the callers of
``immediate_transaction`` around it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

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


def immediate_transaction(conn: sqlite3.Connection) -> sqlite3.Connection:
    """Begin one write transaction (``BEGIN IMMEDIATE``: writers from every process serialize)
    and return ``conn`` as its bracket: ``with immediate_transaction(conn):`` commits at the
    end of the block and rolls back on any exception, ``BaseException`` included, and when the
    ``COMMIT`` itself fails.

    sqlite3's own context manager closes the bracket, in C: this runs twice per message on the
    hot path. Driver errors leave as sqlite3's; the caller types them (:func:`translate`), as
    :meth:`~harel_sa.sqlite.watch.Watch.run` does for every operation.
    """
    conn.execute("BEGIN IMMEDIATE")
    return conn


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

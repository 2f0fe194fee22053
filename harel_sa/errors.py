"""Every error harel_sa raises on purpose.

All of them derive from :class:`HarelSAError`. Errors about the caller's input also derive
from the built-in they refine (``ValueError`` or ``TypeError``) and are raised before anything
is written: the queue is exactly as it was.
"""

from __future__ import annotations


class HarelSAError(Exception):
    """Base class of every error raised by harel_sa."""


class InvalidArgumentError(HarelSAError, ValueError):
    """An argument has a value the operation does not accept (nothing was written)."""


class InvalidArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument has a type the operation does not accept (nothing was written)."""


class TransportClosedError(HarelSAError):
    """The transport was closed, or can no longer be used (its subclasses say why); open a
    new one."""


class SchemaError(HarelSAError):
    """The database lacks tables, columns or indexes (or revisions) this version needs.

    The message names what is missing and the command that brings the database to head.
    """


class StorageError(HarelSAError):
    """SQLite refused the operation; the transaction was rolled back, nothing was written."""


class BusyError(StorageError):
    """The write lock was not won within ``busy_timeout``; retry the call later."""


class StorageFullError(StorageError):
    """The database or its disk is full (``SQLITE_FULL``, or ``SQLITE_IOERR_SHMSIZE``: the
    shared-memory file could not grow); make room and retry."""


class ReadOnlyError(StorageError):
    """The database cannot be written: a SQLite file (or its directory) that is read-only, or
    a PostgreSQL database or server that refuses writes (read-only transactions, a standby)."""


class NotADatabaseError(StorageError):
    """The target exists but is not a SQLite database, or is encrypted (``SQLITE_NOTADB``).

    Raised for that result code only: a full disk, a lock or an I/O error at open get their own
    error types, so a healthy file is never called "not a database".
    """


class DiskIOError(StorageError):
    """SQLite could not read or write the file (``SQLITE_IOERR``; the message names the
    extended code, e.g. ``SQLITE_IOERR_FSYNC``). The file is not said to be damaged: check the
    disk, the filesystem and the kernel log, then retry."""


class ForkedError(TransportClosedError):
    """The transport was opened in another process and this one is a ``fork()`` of it.

    A SQLite connection must never cross ``fork()``: the child refuses to use it (nothing is
    written through it, and it is never closed from the child). While the parent holds the file
    open, even a connection the child opens afresh is not protected by SQLite's locks, so a new
    transport on that file is refused in the child too. Open transports only in the processes
    that use them: close the parent's before forking, open them after the fork (for example in
    gunicorn's ``post_fork`` hook), or start workers with the ``spawn`` or ``forkserver``
    method of :mod:`multiprocessing`.
    """


class DatabaseReplacedError(TransportClosedError):
    """The path no longer names the file this transport opened: it was deleted, renamed, or
    replaced by another file (a restored backup, say).

    The operation ran on the file the transport still has open, which nobody else will see, so
    it is reported instead of acknowledged; every later call raises this error too. Close the
    transport, find out which file holds the queue now, and open a new transport on it.
    """


class ConnectionLostError(StorageError):
    """The connection to the database server broke during the call (a server restart, a
    terminated backend, a network drop), or no connection could be made.

    Whether a write that was in flight took is unknown: a claim may have leased a message this
    caller never received (it comes back when its lease lapses), an ack may have taken. The
    transport reconnects on the next call.
    """


def made_by_create(name: str) -> InvalidArgumentTypeError:
    """What an async transport called directly says: it is made by its awaited ``create``
    (which opens its connections on the event loop)."""
    return InvalidArgumentTypeError(
        f"{name} is made with `await {name}.create(...)` (it opens its connections on the "
        f"event loop), not by calling {name}(...)"
    )

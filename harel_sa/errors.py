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
    """The transport was closed; open a new one."""


class SchemaError(HarelSAError):
    """The database lacks tables, columns or indexes (or revisions) this version needs.

    The message names what is missing and the command that brings the database to head.
    """


class StorageError(HarelSAError):
    """SQLite refused the operation; the transaction was rolled back, nothing was written."""


class BusyError(StorageError):
    """The write lock was not won within ``busy_timeout``; retry the call later."""


class StorageFullError(StorageError):
    """The database or its disk is full (``SQLITE_FULL``); make room and retry."""


class ReadOnlyError(StorageError):
    """The database file (or its directory) cannot be written."""


class NotADatabaseError(StorageError):
    """The target exists but is not a SQLite database (or is encrypted or corrupt)."""

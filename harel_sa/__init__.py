"""harel_sa: a durable one-host message queue on SQLite.

Producers ``publish`` events into groups; workers ``claim`` a group's head under a lease, then
``ack`` or ``nack`` it. FIFO within a group, one message in flight per group, round-robin
across groups, with a priority floor and routing keys.
"""

from harel_sa.errors import (
    BusyError,
    DatabaseReplacedError,
    DiskIOError,
    ForkedError,
    HarelSAError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    NotADatabaseError,
    ReadOnlyError,
    SchemaError,
    StorageError,
    StorageFullError,
    TransportClosedError,
)
from harel_sa.events import Event, Lease
from harel_sa.models import (
    Bucket,
    DeadMessage,
    PriorityBucket,
    QueuedMessage,
    RoutingBucket,
    Stats,
)
from harel_sa.schema import HEAD_REVISION, Names, metadata, schema_for
from harel_sa.sqlite.aio import AsyncSqliteTransport
from harel_sa.sqlite.transport import SqliteTransport
from harel_sa.worker import AsyncWorker, DeadLetter, Retry, Worker


def __getattr__(name: str) -> str:
    """``harel_sa.__version__``: the installed package's version, read from its metadata
    when first asked for (importlib.metadata costs an import nobody else needs)."""
    if name != "__version__":
        raise AttributeError(f"module 'harel_sa' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("harel-sa")
    except PackageNotFoundError:  # pragma: no cover - run from a bare source tree
        return "0+unknown"


__all__ = [
    "HEAD_REVISION",
    "AsyncSqliteTransport",
    "AsyncWorker",
    "Bucket",
    "BusyError",
    "DatabaseReplacedError",
    "DeadLetter",
    "DeadMessage",
    "DiskIOError",
    "Event",
    "ForkedError",
    "HarelSAError",
    "InvalidArgumentError",
    "InvalidArgumentTypeError",
    "Lease",
    "Names",
    "NotADatabaseError",
    "PriorityBucket",
    "QueuedMessage",
    "ReadOnlyError",
    "Retry",
    "RoutingBucket",
    "SchemaError",
    "SqliteTransport",
    "Stats",
    "StorageError",
    "StorageFullError",
    "TransportClosedError",
    "Worker",
    "__version__",
    "metadata",
    "schema_for",
]

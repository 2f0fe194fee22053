"""harel_sa: a durable one-host message queue on SQLite.

Producers ``publish`` events into groups; workers ``claim`` a group's head under a lease, then
``ack`` or ``nack`` it. FIFO within a group, one message in flight per group, round-robin
across groups, with a priority floor and routing keys.
"""

from typing import TYPE_CHECKING, Any

from harel_sa.errors import (
    BusyError,
    ConnectionLostError,
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

if TYPE_CHECKING:
    from harel_sa.postgres.aio import AsyncPostgresTransport
    from harel_sa.postgres.transport import PostgresTransport


def __getattr__(name: str) -> Any:
    """``harel_sa.__version__``: the installed package's version, read from its metadata
    when first asked for (importlib.metadata costs an import nobody else needs); and
    ``PostgresTransport``, imported when first asked for (it needs the ``postgres`` extra)."""
    if name == "PostgresTransport":
        from harel_sa.postgres.transport import PostgresTransport

        return PostgresTransport
    if name == "AsyncPostgresTransport":
        from harel_sa.postgres.aio import AsyncPostgresTransport

        return AsyncPostgresTransport
    if name != "__version__":
        raise AttributeError(f"module 'harel_sa' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("harel-sa")
    except PackageNotFoundError:  # pragma: no cover - run from a bare source tree
        return "0+unknown"


__all__ = [
    "HEAD_REVISION",
    "AsyncPostgresTransport",
    "AsyncSqliteTransport",
    "AsyncWorker",
    "Bucket",
    "BusyError",
    "ConnectionLostError",
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
    "PostgresTransport",
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

"""harel_sa: a durable one-host message queue on SQLite.

Producers ``publish`` events into groups; workers ``claim`` a group's head under a lease, then
``ack`` or ``nack`` it. FIFO within a group, one message in flight per group, round-robin
across groups, with a priority floor and routing keys.
"""

from harel_sa.admin import (
    Bucket,
    DeadMessage,
    PriorityBucket,
    QueuedMessage,
    RoutingBucket,
    Stats,
)
from harel_sa.aio import AsyncSqliteTransport
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
from harel_sa.schema import HEAD_REVISION, SCHEMA_VERSION, Names, metadata, schema_for
from harel_sa.transport import SqliteTransport
from harel_sa.worker import AsyncWorker, Worker

__all__ = [
    "HEAD_REVISION",
    "SCHEMA_VERSION",
    "AsyncSqliteTransport",
    "AsyncWorker",
    "Bucket",
    "BusyError",
    "DatabaseReplacedError",
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
    "RoutingBucket",
    "SchemaError",
    "SqliteTransport",
    "Stats",
    "StorageError",
    "StorageFullError",
    "TransportClosedError",
    "Worker",
    "metadata",
    "schema_for",
]

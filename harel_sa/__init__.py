"""harel_sa: a durable one-host message queue on SQLite.

Producers ``publish`` events into groups; workers ``claim`` a group's head under a lease, then
``ack`` or ``nack`` it. FIFO within a group, one message in flight per group, round-robin
across groups, with a priority floor and routing keys.

The errors are imported with the package; every other name when first asked for, from the
module that defines it: a program that needs only the schema (a host's Alembic environment,
its models beside harel_sa's tables) does not pay for pydantic, the workers or PostgreSQL's
driver.
"""

from typing import TYPE_CHECKING, Any

from harel_sa import lazy
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

if TYPE_CHECKING:
    from harel_sa.events import Event, Lease
    from harel_sa.models import (
        Bucket,
        DeadMessage,
        Limit,
        Pause,
        PriorityBucket,
        QueuedMessage,
        RoutingBucket,
        Stats,
    )
    from harel_sa.outbox import AsyncOutbox, Outbox
    from harel_sa.periodic import Periodic
    from harel_sa.postgres.aio import AsyncPostgresTransport
    from harel_sa.postgres.transport import PostgresTransport
    from harel_sa.schema import HEAD_REVISION, Names, metadata, schema_for
    from harel_sa.sqlite.aio import AsyncSqliteTransport
    from harel_sa.sqlite.transport import SqliteTransport
    from harel_sa.worker import AsyncHandlers, AsyncWorker, DeadLetter, Handlers, Retry, Worker

#: Where each name that is not an error is defined (the PostgreSQL transports need the
#: ``postgres`` extra).
_HOMES = {
    "Event": "harel_sa.events",
    "Lease": "harel_sa.events",
    "Bucket": "harel_sa.models",
    "DeadMessage": "harel_sa.models",
    "Limit": "harel_sa.models",
    "Pause": "harel_sa.models",
    "PriorityBucket": "harel_sa.models",
    "QueuedMessage": "harel_sa.models",
    "RoutingBucket": "harel_sa.models",
    "Stats": "harel_sa.models",
    "Outbox": "harel_sa.outbox",
    "AsyncOutbox": "harel_sa.outbox",
    "Periodic": "harel_sa.periodic",
    "HEAD_REVISION": "harel_sa.schema",
    "Names": "harel_sa.schema",
    "metadata": "harel_sa.schema",
    "schema_for": "harel_sa.schema",
    "AsyncSqliteTransport": "harel_sa.sqlite.aio",
    "SqliteTransport": "harel_sa.sqlite.transport",
    "AsyncWorker": "harel_sa.worker",
    "DeadLetter": "harel_sa.worker",
    "Handlers": "harel_sa.worker",
    "AsyncHandlers": "harel_sa.worker",
    "Retry": "harel_sa.worker",
    "Worker": "harel_sa.worker",
    "AsyncPostgresTransport": "harel_sa.postgres.aio",
    "PostgresTransport": "harel_sa.postgres.transport",
}
#: The modules that need an extra installed, and that extra.
_EXTRAS = {"harel_sa.postgres.aio": "postgres", "harel_sa.postgres.transport": "postgres"}
_import = lazy.importer(globals(), _HOMES, _EXTRAS)


def __getattr__(name: str) -> Any:
    """A public name, imported from its module when first asked for (then kept); and
    ``harel_sa.__version__``, the installed package's version, read from its metadata."""
    if name != "__version__":
        return _import(name)
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("harel-sa")
    except PackageNotFoundError:  # pragma: no cover - run from a bare source tree
        return "0+unknown"


__dir__ = lazy.lister(globals())


__all__ = [
    "HEAD_REVISION",
    "AsyncHandlers",
    "AsyncOutbox",
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
    "Handlers",
    "HarelSAError",
    "InvalidArgumentError",
    "InvalidArgumentTypeError",
    "Lease",
    "Limit",
    "Names",
    "NotADatabaseError",
    "Outbox",
    "Pause",
    "Periodic",
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

"""The worker loop: :class:`Worker` (threads) and :class:`AsyncWorker` (tasks), one logic.

A worker claims a message, runs the handler on its lease, acks on success, retries with a growing
delay (:class:`Backoff`) on failure until ``max_deliveries`` (default
:data:`DEFAULT_MAX_DELIVERIES`), then dead-letters; :class:`Retry` and :class:`DeadLetter` steer
it. A heartbeat extends the leases held; on ``stop()``, SIGTERM or SIGINT it stops claiming and
gives the handlers ``grace`` seconds, then gives back what it still holds with ``nack(0)``.
Batching is :attr:`WorkerOptions.batching`. The decisions live in :mod:`~harel_sa.worker.runstate`
and :mod:`~harel_sa.worker.programs`; :mod:`~harel_sa.worker.threads` and
:mod:`~harel_sa.worker.tasks` only perform them. Delivery is at least once.
"""

from typing import TYPE_CHECKING

from harel_sa import lazy

if TYPE_CHECKING:
    from harel_sa.worker.control import DeadLetter, HandlerControl, Retry
    from harel_sa.worker.handlers import AsyncHandlers, Handlers
    from harel_sa.worker.observe import Observer
    from harel_sa.worker.options import (
        DEFAULT_ACK_WAIT,
        DEFAULT_MAX_DELIVERIES,
        Backoff,
        WorkerKwargs,
        WorkerOptions,
    )
    from harel_sa.worker.runstate import WorkerStats
    from harel_sa.worker.tasks import AsyncWorker
    from harel_sa.worker.threads import Worker

#: Where each name is defined: imported when first asked for, so that the options (say, for a
#: command's defaults) cost none of the drivers.
_HOMES = {
    "DeadLetter": "harel_sa.worker.control",
    "HandlerControl": "harel_sa.worker.control",
    "Retry": "harel_sa.worker.control",
    "AsyncHandlers": "harel_sa.worker.handlers",
    "Handlers": "harel_sa.worker.handlers",
    "Observer": "harel_sa.worker.observe",
    "DEFAULT_ACK_WAIT": "harel_sa.worker.options",
    "DEFAULT_MAX_DELIVERIES": "harel_sa.worker.options",
    "Backoff": "harel_sa.worker.options",
    "WorkerKwargs": "harel_sa.worker.options",
    "WorkerOptions": "harel_sa.worker.options",
    "WorkerStats": "harel_sa.worker.runstate",
    "AsyncWorker": "harel_sa.worker.tasks",
    "Worker": "harel_sa.worker.threads",
}
__getattr__ = lazy.importer(globals(), _HOMES)
__dir__ = lazy.lister(globals())

__all__ = [
    "DEFAULT_ACK_WAIT",
    "DEFAULT_MAX_DELIVERIES",
    "AsyncHandlers",
    "AsyncWorker",
    "Backoff",
    "DeadLetter",
    "HandlerControl",
    "Handlers",
    "Observer",
    "Retry",
    "Worker",
    "WorkerKwargs",
    "WorkerOptions",
    "WorkerStats",
]

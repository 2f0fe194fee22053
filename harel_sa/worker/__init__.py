"""The worker loop: :class:`Worker` (threads) and :class:`AsyncWorker` (tasks), one logic.

A worker claims a message, runs the handler on its lease, acks on success (fusing the ack with
the next claim while it goes on), retries with a growing delay on failure (:class:`Backoff`
from the lease's ``deliveries``) until ``max_deliveries`` (default
:data:`DEFAULT_MAX_DELIVERIES`), then dead-letters; a handler steers its message with
:class:`Retry` and :class:`DeadLetter`. A heartbeat thread extends the leases held every
``visibility / 3`` seconds; ``concurrency`` handlers run at once; the worker stops cleanly: on
``stop()``, SIGTERM or SIGINT it stops claiming, lets the handlers in flight finish for up to
``grace`` seconds, then gives back what it still holds with ``nack(0)`` (a second signal ends
the grace at once). With an empty queue it polls every ``poll_interval`` seconds.

**Batches** (``batch`` above 1, with ``concurrency`` above 1; off by default): the free slots
are filled by one ``claim_many`` of up to ``batch`` leases, and the acks of handlers that end
close together go in one commit, fused with the claim for the slots they free
(``ack_many_and_claim_many``). An ack waits at most ``ack_wait`` seconds (default
:data:`DEFAULT_ACK_WAIT`) for the others, and not at all once no other handler is running;
``ack_wait=0`` sends each ack as soon as the batcher sees it. The trade-off: many messages a
commit (at ``synchronous=FULL`` a commit is an fsync) against each ack landing up to
``ack_wait`` later, and one more thread (task) plus a hand-off per message, which a deep single
group (one message in flight, so one a batch) pays without gaining anything. A handler's ack
counts as succeeded only once its batch committed; nacks and dead letters stay single calls;
leases handed to a slot that had not started when a stop came are released with the rest.

**One logic, two drivers.** The decisions live in :mod:`~harel_sa.worker.run` (the state of a
run) and the order of the calls in :mod:`~harel_sa.worker.programs` (a slot, the supervisor:
generators of typed :mod:`~harel_sa.worker.steps`); :mod:`~harel_sa.worker.threads` performs
the steps with blocking calls, :mod:`~harel_sa.worker.tasks` awaits them; neither decides
anything.

It logs on ``harel_sa.worker`` (INFO: start, stop, releases, dead letters; WARNING: handler
failures with the retry time, lost leases, a late heartbeat, a blocked event loop; DEBUG:
each message) and never configures logging. Delivery is at least once: a handler that outlives
its lease (heartbeat starved, lease lost, process killed) may see its message again.
"""

from typing import TYPE_CHECKING

from harel_sa import lazy

if TYPE_CHECKING:
    from harel_sa.worker.control import DeadLetter, HandlerControl, Retry
    from harel_sa.worker.observe import Observer
    from harel_sa.worker.options import (
        DEFAULT_ACK_WAIT,
        DEFAULT_MAX_DELIVERIES,
        Backoff,
        WorkerKwargs,
        WorkerOptions,
    )
    from harel_sa.worker.run import WorkerStats
    from harel_sa.worker.tasks import AsyncWorker
    from harel_sa.worker.threads import Worker

#: Where each name is defined: imported when first asked for, so that the options (say, for a
#: command's defaults) cost none of the drivers.
_HOMES = {
    "DeadLetter": "harel_sa.worker.control",
    "HandlerControl": "harel_sa.worker.control",
    "Retry": "harel_sa.worker.control",
    "Observer": "harel_sa.worker.observe",
    "DEFAULT_ACK_WAIT": "harel_sa.worker.options",
    "DEFAULT_MAX_DELIVERIES": "harel_sa.worker.options",
    "Backoff": "harel_sa.worker.options",
    "WorkerKwargs": "harel_sa.worker.options",
    "WorkerOptions": "harel_sa.worker.options",
    "WorkerStats": "harel_sa.worker.run",
    "AsyncWorker": "harel_sa.worker.tasks",
    "Worker": "harel_sa.worker.threads",
}
__getattr__ = lazy.importer(globals(), _HOMES)
__dir__ = lazy.lister(globals())

__all__ = [
    "DEFAULT_ACK_WAIT",
    "DEFAULT_MAX_DELIVERIES",
    "AsyncWorker",
    "Backoff",
    "DeadLetter",
    "HandlerControl",
    "Observer",
    "Retry",
    "Worker",
    "WorkerKwargs",
    "WorkerOptions",
    "WorkerStats",
]

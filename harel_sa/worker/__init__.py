"""The worker loop: :class:`Worker` (threads) and :class:`AsyncWorker` (tasks), one logic.

A worker claims a message, runs the handler on its lease, acks on success (fusing the ack with
the next claim while it goes on), nacks with a growing delay on failure (:class:`Backoff`
from the lease's ``deliveries``), extends the leases it holds from a heartbeat every
``visibility / 3`` seconds, runs ``concurrency`` handlers at once, and stops cleanly: on
``stop()``, SIGTERM or SIGINT it stops claiming, lets the handlers in flight finish for up to
``grace`` seconds, then gives back what it still holds with ``nack(0)`` (a second signal
ends the grace at once). With an empty queue it polls every ``poll_interval`` seconds.

**One logic, two drivers.** Every decision lives in :mod:`harel_sa.worker.policy`: generator
programs that yield steps (claim, handle, ack-and-claim, nack, extend, sleep) and a run state
shared by the slots. :mod:`~harel_sa.worker.threads` performs the steps with blocking calls,
:mod:`~harel_sa.worker.tasks` awaits them; neither decides anything.

Delivery is at least once: a handler that outlives its lease (heartbeat starved, lease lost,
process killed) may see its message again. A lost lease is logged (logger
``harel_sa.worker``), counted in :attr:`WorkerStats.lost`, and the handler's ack then changes
nothing.
"""

from harel_sa.worker.policy import Backoff, WorkerKwargs, WorkerOptions, WorkerStats
from harel_sa.worker.tasks import AsyncWorker
from harel_sa.worker.threads import Worker

__all__ = ["AsyncWorker", "Backoff", "Worker", "WorkerKwargs", "WorkerOptions", "WorkerStats"]

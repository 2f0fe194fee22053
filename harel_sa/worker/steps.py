"""What a worker's programs ask their driver to do: seven kinds of step, each plain data.

A program (:mod:`~harel_sa.worker.programs`) yields a step; the driver performs it
(``Worker._perform`` on a thread, ``AsyncWorker._perform`` awaited on the loop) and stores the
answer in the step (``Perform.result``, ``Handle.outcome``, ``WaitSlots.alive``), which the
program reads when it resumes. So the programs are written once, and each driver is a loop over
steps with one ``match`` over their kinds.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from harel_sa import settlements
from harel_sa.errors import HarelSAError
from harel_sa.events import Lease
from harel_sa.worker.outcomes import RETURNED, Outcome

if TYPE_CHECKING:
    from harel_sa.worker.operations import AsyncWorkerTransport, WorkerTransport

R = TypeVar("R", covariant=True)
T = TypeVar("T")
_UNSET: Any = None  # a step's result until performed


class Performs(Protocol[R]):
    """A transport call as a value (:mod:`~harel_sa.worker.operations`), answering ``R``."""

    def on(self, t: WorkerTransport) -> R: ...
    async def on_async(self, t: AsyncWorkerTransport) -> R: ...


def perform(call: Performs[R], t: WorkerTransport) -> R | HarelSAError:
    """``call`` on ``t``: what it returned, or the harel_sa error it raised. Unwatched: a
    settle the worker makes itself is no handler's (see :class:`Handle`)."""
    token = settlements.watch(None)
    try:
        return call.on(t)
    except HarelSAError as error:
        return error
    finally:
        settlements.unwatch(token)


async def perform_async(call: Performs[R], t: AsyncWorkerTransport) -> R | HarelSAError:
    """:func:`perform`, awaited."""
    token = settlements.watch(None)
    try:
        return await call.on_async(t)
    except HarelSAError as error:
        return error
    finally:
        settlements.unwatch(token)


@dataclass(slots=True)
class Perform(Generic[T]):
    """Perform ``op`` (a call, or a batch) on the transport -> ``result``: what it returned
    (:class:`~harel_sa.worker.operations.Done`, a batch's ``Sent``), or the harel_sa error it
    raised (a busy lock, a closed transport ...)."""

    op: Performs[T]
    result: T | HarelSAError = _UNSET


@dataclass(slots=True)
class Handle:
    """Run the handler on ``lease`` -> ``outcome``.

    The handler's own settles (its ``ack``, ``nack``, ``dead_letter``) are reported to the
    run (:mod:`~harel_sa.settlements`): the driver has each slot's thread or task watch for
    its whole life, not around each handler (setting a context variable costs more than a
    quick handler), and the worker's own calls are made unwatched (:func:`perform`)."""

    lease: Lease[Any]
    outcome: Outcome = RETURNED


@dataclass(slots=True)
class Wait:
    """Wait ``seconds``; end early when the worker stops (``wake_on_stop``) or is done, or
    (``listen``) when the transport's ``wait_for_messages`` hears of a message."""

    seconds: float
    wake_on_stop: bool
    # A hint to the driver, not part of what the step is (equal steps, listening or not).
    listen: bool = field(default=False, compare=False)


@dataclass(slots=True)
class WaitBell:
    """The batcher waits up to ``seconds`` for its bell to ring (the run rings it when an ack
    or a free slot wants it, and on a stop); a ring that came before the wait ends it at once.
    ``idle``: the wait after a claim found fewer messages than it asked for (the poll), which
    also ends when the transport hears of a message -> ``heard``."""

    seconds: float
    idle: bool = False
    heard: bool = False


@dataclass(slots=True)
class Take:
    """A batching slot found no lease waiting: wait until the batcher wakes it (leases came,
    or it ended). Wake-ups are counted, not flags: one given before the wait ends it at once,
    and each ends one wait."""


@dataclass(slots=True)
class WaitSlots:
    """Wait up to ``seconds`` for a slot to end -> ``alive``: how many are still running."""

    seconds: float
    alive: int = 0


@dataclass(slots=True)
class Abandon:
    """Give up on the slots still running: cancel them (tasks) or leave them (threads)."""


Step = Perform[Any] | Handle | Wait | WaitBell | Take | WaitSlots | Abandon
Routine = Generator[Step, None, None]

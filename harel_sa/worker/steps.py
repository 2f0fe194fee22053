"""What a worker's programs ask their driver to do: seven kinds of step, each plain data.

A program yields a step; the driver performs it (one ``match`` in ``Worker._perform`` and in
``AsyncWorker._perform``) and stores the answer in it (``Perform.result``, ``Handle.outcome``,
``WaitSlots.alive``) for the program to read when it resumes.
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
    """Perform ``op`` on the transport -> ``result``: what it returned, or the harel_sa error
    it raised."""

    op: Performs[T]
    result: T | HarelSAError = _UNSET


@dataclass(slots=True)
class Handle:
    """Run the handler on ``lease`` -> ``outcome``. Its own settles are reported to the run:
    each slot watches (:mod:`~harel_sa.settlements`) for its whole life, and the worker's
    own calls are made unwatched (:func:`perform`)."""

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
    """The batcher waits up to ``seconds`` for its bell; a ring before the wait ends it at
    once. ``idle`` (the poll after a short claim): it also ends when the transport hears of a
    message -> ``heard``."""

    seconds: float
    idle: bool = False
    heard: bool = False


@dataclass(slots=True)
class Take:
    """A batching slot waits until the batcher wakes it. Wake-ups are counted: one given
    before the wait ends it at once, and each ends one wait."""


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

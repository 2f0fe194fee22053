"""What a worker's programs ask their driver to do: eight kinds of step, each typed.

A program (:mod:`~harel_sa.worker.programs`) yields a step; the driver performs it, with
``step.sync(driver)`` (threads) or ``await step.aio(driver)`` (tasks), and the step keeps its
own answer (``Perform.result``, ``Handle.outcome``, ``WaitSlots.alive``), which the program reads
when it resumes. So the programs are written once, and each driver is a loop over steps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from harel_sa import settlements
from harel_sa.errors import HarelSAError
from harel_sa.events import Lease
from harel_sa.worker.exchange import DUE, Exchange
from harel_sa.worker.outcomes import RETURNED, Outcome, outcome_of_await, outcome_of_call
from harel_sa.worker.wake import QUICK, Wake

if TYPE_CHECKING:
    from harel_sa.worker.operations import AsyncWorkerTransport, WorkerTransport
    from harel_sa.worker.runstate import RunState

R = TypeVar("R", covariant=True)
T = TypeVar("T")
_UNSET: Any = None  # a step's result until performed


class SyncDriver(Protocol):
    """What :class:`~harel_sa.Worker` offers the steps."""

    transport: WorkerTransport

    @property
    def handler(self) -> Callable[[Lease[Any]], object]: ...

    def wait(self, seconds: float, wake_on_stop: bool, listen: bool = False) -> None: ...
    def wait_slots(self, seconds: float) -> int: ...
    def wait_bell(self, seconds: float | None, idle: bool) -> bool: ...
    def wait_woken(self) -> None: ...
    def abandon(self) -> None: ...


class AsyncDriver(Protocol):
    """What :class:`~harel_sa.AsyncWorker` offers the steps."""

    transport: AsyncWorkerTransport
    handler: Callable[[Lease[Any]], Awaitable[None]]

    async def wait(self, seconds: float, wake_on_stop: bool, listen: bool = False) -> None: ...
    async def wait_slots(self, seconds: float) -> int: ...
    async def wait_bell(self, seconds: float | None, idle: bool) -> bool: ...
    async def wait_woken(self) -> None: ...
    async def abandon(self) -> None: ...


class Performs(Protocol[R]):
    """A transport call as a value (:mod:`~harel_sa.worker.operations`), answering ``R``."""

    def on(self, t: WorkerTransport) -> R: ...
    async def on_async(self, t: AsyncWorkerTransport) -> R: ...


def perform(call: Performs[R], d: SyncDriver) -> R | HarelSAError:
    """``call`` on the driver's transport: what it returned, or the harel_sa error it raised.
    Unwatched: a settle the worker makes itself is no handler's (see :class:`Handle`)."""
    token = settlements.watch(None)
    try:
        return call.on(d.transport)
    except HarelSAError as error:
        return error
    finally:
        settlements.unwatch(token)


async def perform_async(call: Performs[R], d: AsyncDriver) -> R | HarelSAError:
    """:func:`perform`, awaited."""
    token = settlements.watch(None)
    try:
        return await call.on_async(d.transport)
    except HarelSAError as error:
        return error
    finally:
        settlements.unwatch(token)


@dataclass(slots=True)
class Perform(Generic[T]):
    """Perform ``op`` (a call, or a batch) on the transport -> ``result``: what it returned
    (:class:`~harel_sa.worker.operations.Done`, a batch's ``Sent``), or the harel_sa error it
    raised (a busy lock, a closed transport ...). Read ``result`` once performed."""

    op: Performs[T]
    result: T | HarelSAError = _UNSET

    def sync(self, d: SyncDriver) -> None:
        self.result = perform(self.op, d)

    async def aio(self, d: AsyncDriver) -> None:
        self.result = await perform_async(self.op, d)


@dataclass(slots=True)
class Handle:
    """Run the handler on ``lease`` -> ``outcome``.

    The handler's own settles (its ``ack``, ``nack``, ``dead_letter``) are reported to the
    run (:mod:`~harel_sa.settlements`): the driver has each slot's thread or task watch for
    its whole life, not around each handler (setting a context variable costs more than a
    quick handler), and the worker's own calls are made unwatched (:func:`perform`)."""

    lease: Lease[Any]
    outcome: Outcome = RETURNED

    def sync(self, d: SyncDriver) -> None:
        self.outcome = outcome_of_call(d.handler, self.lease, d.transport.prefix)

    async def aio(self, d: AsyncDriver) -> None:
        self.outcome = await outcome_of_await(d.handler, self.lease, d.transport.prefix)


@dataclass(slots=True)
class Serve:
    """A batching slot's handlers: run the handler on ``lease``, give it back to the
    ``exchange`` when it returned, and go on with the next lease it hands on -> ``after``:
    the outcome of the last lease when it was not given back (it raised, or the batcher is
    done), else ``None``; ``due``: its ack made the acks due with no lease left for the slot.
    A run of quick handlers costs one step, not one a message."""

    lease: Lease[Any]
    exchange: Exchange
    wake: Wake
    run: RunState
    after: Outcome | None = None
    due: bool = False

    def ended(self, outcome: Outcome, seconds: float, now: float) -> bool:
        """The handler of ``lease`` ended with ``outcome`` after ``seconds``: ``True`` when
        the slot stops serving (``after`` says why); else ``lease`` is the next one."""
        self.wake.quick = seconds < QUICK
        run = self.run
        if run.timing:
            run.handler_took(seconds)
        if outcome is not RETURNED:
            self.after = outcome
            return True
        following = self.exchange.give(self.lease, now)
        if following is None:
            return True
        if isinstance(following, str):
            if following == DUE:
                self.due = True
            else:  # CLOSED: the ack is the slot's to send
                self.after = outcome
            return True
        run.handling()
        self.lease = following
        return False

    def sync(self, d: SyncDriver) -> None:
        handler, prefix, clock = d.handler, d.transport.prefix, self.exchange.clock
        started = clock()
        while True:
            outcome = outcome_of_call(handler, self.lease, prefix)
            now = clock()
            if self.ended(outcome, now - started, now):
                return
            started = now

    async def aio(self, d: AsyncDriver) -> None:
        handler, prefix, clock = d.handler, d.transport.prefix, self.exchange.clock
        started = clock()
        while True:
            outcome = await outcome_of_await(handler, self.lease, prefix)
            now = clock()
            if self.ended(outcome, now - started, now):
                return
            started = now


@dataclass(slots=True)
class Wait:
    """Wait ``seconds``; end early when the worker stops (``wake_on_stop``) or is done, or
    (``listen``) when the transport's ``wait_for_messages`` hears of a message."""

    seconds: float
    wake_on_stop: bool
    # A hint to the driver, not part of what the step is (equal steps, listening or not).
    listen: bool = field(default=False, compare=False)

    def sync(self, d: SyncDriver) -> None:
        d.wait(self.seconds, self.wake_on_stop, self.listen)

    async def aio(self, d: AsyncDriver) -> None:
        await d.wait(self.seconds, self.wake_on_stop, self.listen)


@dataclass(slots=True)
class WaitBell:
    """The batcher waits up to ``seconds`` (``None``: as long as it takes) for its bell to
    ring (the run rings it when an ack or a free slot wants it, and on a stop); a ring that
    came before the wait ends it at once. ``idle``: the wait after a claim found fewer
    messages than it asked for (the poll), which also ends when the transport hears of a
    message -> ``heard``."""

    seconds: float | None
    idle: bool = False
    heard: bool = False

    def sync(self, d: SyncDriver) -> None:
        self.heard = d.wait_bell(self.seconds, self.idle)

    async def aio(self, d: AsyncDriver) -> None:
        self.heard = await d.wait_bell(self.seconds, self.idle)


@dataclass(slots=True)
class Take:
    """A batching slot found no lease waiting: wait until the batcher wakes it (leases came,
    or it ended). Wake-ups are counted, not flags: one given before the wait ends it at once,
    and each ends one wait."""

    def sync(self, d: SyncDriver) -> None:
        d.wait_woken()

    async def aio(self, d: AsyncDriver) -> None:
        await d.wait_woken()


@dataclass(slots=True)
class WaitSlots:
    """Wait up to ``seconds`` for a slot to end -> ``alive``: how many are still running."""

    seconds: float
    alive: int = 0

    def sync(self, d: SyncDriver) -> None:
        self.alive = d.wait_slots(self.seconds)

    async def aio(self, d: AsyncDriver) -> None:
        self.alive = await d.wait_slots(self.seconds)


@dataclass(slots=True)
class Abandon:
    """Give up on the slots still running: cancel them (tasks) or leave them (threads)."""

    def sync(self, d: SyncDriver) -> None:
        d.abandon()

    async def aio(self, d: AsyncDriver) -> None:
        await d.abandon()


Action = Perform[Any] | Handle | Serve | Wait | WaitBell | Take | WaitSlots | Abandon
Routine = Generator[Action, None, None]

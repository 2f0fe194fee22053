"""``AsyncWorker``: the programs of :mod:`harel_sa.worker.programs`, driven by asyncio tasks.

Each slot is a task on the running loop performing its program's steps with awaited transport
calls; ``run`` performs the supervisor's steps and handles the signals through the loop. The
heartbeat and the ticker are threads on a sync twin of the transport, so a handler that blocks
the loop does not stop them.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, Generic, Unpack, assert_never

from harel_sa import settlements
from harel_sa.async_transports import AsyncTransport
from harel_sa.errors import InvalidArgumentError
from harel_sa.events import E, Lease
from harel_sa.periodic import Periodic
from harel_sa.worker import programs, steps
from harel_sa.worker.heartbeat import Heartbeat, LoopProbe
from harel_sa.worker.options import WorkerKwargs, check_arguments, options_from
from harel_sa.worker.outcomes import outcome_of_await
from harel_sa.worker.runstate import RunState, WorkerStats
from harel_sa.worker.side import SideThread
from harel_sa.worker.steps import Routine, Step
from harel_sa.worker.threads import SIGNALS, _both, on_main_thread
from harel_sa.worker.ticker import Ticker

if TYPE_CHECKING:
    from harel_sa.worker.operations import AsyncWorkerTransport, WorkerTransport


class AsyncWorker(Generic[E]):
    """The async twin of :class:`~harel_sa.Worker`: ``await handler(lease)`` on an
    :class:`~harel_sa.AsyncSqliteTransport` or an :class:`~harel_sa.AsyncPostgresTransport`,
    ``concurrency`` handler tasks on the running loop. When the grace runs out, the handler
    tasks still running are cancelled and their leases released with ``nack(0)``.

    The heartbeat extends on a thread of its own through the transport's ``sync_twin()``, so
    a handler that blocks the loop does not let the leases lapse (it is warned of; it still
    stalls every other handler: use ``asyncio.to_thread``). A private ``:memory:`` queue has
    no twin: there the heartbeat goes through the loop, and a blocked loop loses leases.
    """

    def __init__(
        self,
        transport: AsyncTransport[E],
        handler: Callable[[Lease[E]], Awaitable[None]],
        **kwargs: Unpack[WorkerKwargs],
    ) -> None:
        names = "AsyncSqliteTransport or AsyncPostgresTransport"
        check_arguments(transport, AsyncTransport, names, handler, False)
        self.transport = transport
        self.handler = handler
        self.options, self.handle_signals = options_from(kwargs)
        self._listens = transport.listens
        self._run: RunState | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()
        self._finished = asyncio.Event()
        self._bell = asyncio.Event()  # the batcher's
        self._woken = asyncio.Semaphore(0)  # one release per wake-up
        self._loop_thread = 0

    async def run(
        self, *, max_messages: int | None = None, until_empty: bool = False
    ) -> WorkerStats:
        """As :meth:`Worker.run <harel_sa.Worker.run>`, on the running event loop. A
        cancelled ``run()`` releases what it holds at once, then raises ``CancelledError``."""
        run = RunState(self.options, max_messages, until_empty)
        self._loop = loop = asyncio.get_running_loop()
        self._wake, self._finished = asyncio.Event(), asyncio.Event()
        self._bell, self._woken = asyncio.Event(), asyncio.Semaphore(0)
        self._loop_thread = threading.get_ident()
        routines, on_stop = programs.team(run, self._ring, self._wake_slots)
        run.on_stop = lambda: _both(self._wake.set, on_stop)
        self._run = run
        twin = self._twin()
        # What the heartbeat's and the ticker's threads call.
        calls = twin if twin is not None else ThroughLoop(self.transport, loop)
        visibility = self.options.visibility
        side: list[SideThread] = [
            Heartbeat(
                run,
                lambda lease: calls.extend(lease, visibility),
                LoopProbe(loop),
                through_loop=twin is None,
            )
        ]
        if self.options.periodic:
            clock = self.transport.clock
            side.append(Ticker(calls, self.options.periodic, clock))
        run.started(self.transport.database, self.transport.prefix, "asyncio tasks")
        try:
            with _loop_signals(self.handle_signals, loop, run):
                self._slots = [
                    asyncio.create_task(self._drive_slot(run, program)) for program in routines
                ]
                for thread in side:
                    thread.start()
                await self._drive(programs.supervise(run))
        finally:
            self._finished.set()
            # All asked at once: a cancel while they are joined leaves none running on.
            for thread in side:
                thread.stop()
            for thread in side:
                await asyncio.to_thread(thread.join)
            if twin is not None:
                twin.close()
            self._run = None
        return run.result()

    def stop(self) -> None:
        """As :meth:`Worker.stop <harel_sa.Worker.stop>`; safe from any thread (it hops onto
        the worker's loop)."""
        run, loop = self._run, self._loop
        if run is None or loop is None:
            return
        with suppress(RuntimeError):  # the loop is closed: the run is over
            loop.call_soon_threadsafe(run.request_stop)

    def _twin(self) -> WorkerTransport | None:
        try:
            return self.transport.sync_twin()
        except InvalidArgumentError:  # a private :memory: queue
            return None

    # -- performing the steps ---------------------------------------------------------------
    async def _perform(self, step: Step) -> None:
        match step:
            case steps.Perform():
                step.result = await steps.perform_async(step.op, self.transport)
            case steps.Handle():
                prefix = self.transport.prefix
                step.outcome = await outcome_of_await(self.handler, step.lease, prefix)
            case steps.Wait():
                event = self._wake if step.wake_on_stop else self._finished
                await self._wait_or_hear(event, step.seconds, step.listen)
            case steps.WaitBell():
                listen = step.idle and not self._bell.is_set()
                step.heard = await self._wait_or_hear(self._bell, step.seconds, listen)
                self._bell.clear()  # the program looks at the run again next: none is missed
            case steps.Take():
                await self._woken.acquire()
            case steps.WaitSlots():
                alive = [t for t in self._slots if not t.done()]
                if alive:  # as the threads' join: one slot's end, not a callback on each
                    await asyncio.wait(alive[:1], timeout=step.seconds)
                step.alive = sum(not t.done() for t in self._slots)
            case steps.Abandon():  # cancel the slot tasks still running, and wait for them to end
                for task in self._slots:
                    task.cancel()
                await asyncio.gather(*self._slots, return_exceptions=True)
            case _:
                assert_never(step)

    async def _wait_or_hear(self, event: asyncio.Event, seconds: float, listen: bool) -> bool:
        """Wait up to ``seconds`` for ``event`` or, when ``listen`` (PostgreSQL), for the
        transport to hear of a message (then ``True``)."""
        if not (listen and self._listens):  # SQLite's wait_for_messages only sleeps
            with suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await event.wait()
            return False
        rung = asyncio.ensure_future(event.wait())
        hearing = asyncio.ensure_future(self.transport.wait_for_messages(seconds))
        try:
            await asyncio.wait(
                (rung, hearing), timeout=seconds, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for waiting in (rung, hearing):
                waiting.cancel()
            await asyncio.gather(rung, hearing, return_exceptions=True)
        # A wait that failed (a lost connection) is the next claim's to report.
        return (
            hearing.done()
            and not hearing.cancelled()
            and hearing.exception() is None
            and hearing.result()
        )

    def _ring(self) -> None:
        self._on_loop(self._bell.set)

    def _wake_slots(self, slots: int) -> None:
        for _ in range(slots):
            self._on_loop(self._woken.release)

    def _on_loop(self, call: Callable[[], None]) -> None:
        """``call`` now when on the worker's loop, else through it."""
        if threading.get_ident() == self._loop_thread:
            call()
            return
        loop = self._loop
        if loop is not None:
            with suppress(RuntimeError):  # the loop is closed: the run is over
                loop.call_soon_threadsafe(call)

    # -- the driving -----------------------------------------------------------------------
    async def _drive_slot(self, run: RunState, program: Routine) -> None:
        # The task's own copy of the context: its handlers' settles are reported from now on.
        settlements.watch(run.settled_by_handler)
        try:
            await self._drive(program)
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            run.crashed(error)

    async def _drive(self, program: Routine) -> None:
        """As :meth:`Worker._drive <harel_sa.Worker._drive>`, awaiting each step."""
        step = next(program, None)
        while step is not None:
            try:
                await self._perform(step)
            except BaseException as error:
                try:
                    step = program.throw(error)
                except StopIteration:
                    return
            else:
                step = next(program, None)


class ThroughLoop:
    """The side threads' calls through the worker's loop, where there is no sync twin (a
    private ``:memory:`` queue). A blocked loop stalls them."""

    def __init__(self, transport: AsyncWorkerTransport, loop: asyncio.AbstractEventLoop) -> None:
        self.transport, self.loop = transport, loop

    def extend(self, lease: Lease[Any], visibility: float) -> bool:
        call = self.transport.extend(lease, visibility)
        return asyncio.run_coroutine_threadsafe(call, self.loop).result()

    def publish_tick(self, schedule: Periodic, tick: float, *, catch_up: bool = False) -> bool:
        async def call() -> bool:  # traced: typed an awaitable, not a coroutine
            return await self.transport.publish_tick(schedule, tick, catch_up=catch_up)

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result()


@contextmanager
def _loop_signals(enabled: bool, loop: asyncio.AbstractEventLoop, run: RunState) -> Iterator[None]:
    """SIGTERM/SIGINT request a stop through the loop's own signal handling."""
    if not on_main_thread(enabled):
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        loop.add_signal_handler(sig, run.request_stop, f"{sig.name} received")
    try:
        yield
    finally:
        for sig, handler in previous.items():
            loop.remove_signal_handler(sig)
            signal.signal(sig, handler)

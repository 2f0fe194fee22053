"""``Worker``: the programs of :mod:`harel_sa.worker.programs`, driven by threads.

Each slot is a daemon thread performing its program's steps with blocking transport calls; the
calling thread performs the supervisor's steps and handles the signals.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Generic, Unpack, assert_never

from harel_sa import settlements
from harel_sa.events import E, Lease
from harel_sa.transports import Transport
from harel_sa.worker import programs, steps
from harel_sa.worker.heartbeat import Heartbeat
from harel_sa.worker.options import WorkerKwargs, check_arguments, options_from
from harel_sa.worker.outcomes import outcome_of_call
from harel_sa.worker.runstate import RunState, WorkerStats
from harel_sa.worker.side import SideThread
from harel_sa.worker.steps import Routine, Step
from harel_sa.worker.ticker import Ticker

if TYPE_CHECKING:
    pass

#: How long one wait on the transport lasts at most, so that a stop is seen that soon.
LISTEN_SLICE = 0.1
#: The same for a batching run's idle batcher, which an ack also rings: an ack waits for
#: its commit at most this much longer while the worker is idle.
IDLE_BELL_SLICE = 0.02

SIGNALS = (signal.SIGTERM, signal.SIGINT)  # each asks the run to stop


class Worker(Generic[E]):
    """Runs ``handler(lease)`` on the messages of a :class:`~harel_sa.SqliteTransport` or a
    :class:`~harel_sa.PostgresTransport`.

    ``handler`` returns to have the message acked; raises :class:`~harel_sa.Retry` or
    :class:`~harel_sa.DeadLetter` to have it retried after a delay of its choosing or
    dead-lettered now; raises anything else to have it retried after
    ``backoff.delay(lease.deliveries)`` (dead-lettered at delivery ``max_deliveries``). A
    handler may also ack, nack or dead-letter its lease itself; the worker counts what it did.
    ``concurrency`` handlers run at once, on threads (SQLite serializes their calls;
    PostgreSQL's pool runs them in parallel). The transport stays the caller's: the worker
    never closes it. One :meth:`run` at a time.
    Options: :class:`~harel_sa.worker.WorkerKwargs`.
    """

    def __init__(
        self,
        transport: Transport[E],
        handler: Callable[[Lease[E]], None],
        **kwargs: Unpack[WorkerKwargs],
    ) -> None:
        check_arguments(transport, Transport, "SqliteTransport or PostgresTransport", handler, True)
        self.transport = transport
        self.handler = handler
        self.options, self.handle_signals = options_from(kwargs)
        self._listens = transport.listens
        self._run: RunState | None = None
        self._slots: list[threading.Thread] = []
        self._wake = threading.Event()
        self._finished = threading.Event()
        self._bell = threading.Event()  # the batcher's
        self._woken: queue.SimpleQueue[None] = queue.SimpleQueue()  # one item per wake-up

    def run(self, *, max_messages: int | None = None, until_empty: bool = False) -> WorkerStats:
        """Work until stopped (:meth:`stop`, SIGTERM, SIGINT); return what was done.

        Also returns after ``max_messages`` claims were handled, or (``until_empty``) once a
        claim finds nothing deliverable (parked messages and other workers' leases are not).
        On stop, handlers in flight get ``grace`` seconds; what is still held then is released
        with ``nack(0)`` and its handler thread abandoned (its ack will return ``False``).
        Signals are handled on the main thread only. A handler's ``KeyboardInterrupt`` or
        ``SystemExit`` stops the run the same way, its own lease released at once, and is
        raised again from here.
        """
        run = RunState(self.options, max_messages, until_empty)
        self._wake, self._finished = threading.Event(), threading.Event()
        self._bell, self._woken = threading.Event(), queue.SimpleQueue()
        routines, on_stop = programs.team(run, self._bell.set, self._wake_slots)
        run.on_stop = lambda: _both(self._wake.set, on_stop)
        self._run = run
        side: list[SideThread] = [
            Heartbeat(run, lambda lease: self.transport.extend(lease, self.options.visibility))
        ]
        if self.options.periodic:
            side.append(Ticker(self.transport, self.options.periodic, self.transport.clock))
        run.started(self.transport.database, self.transport.prefix, "threads")
        try:
            with _signals(self.handle_signals, run):
                self._slots = [self._start(run, program) for program in routines]
                for thread in side:
                    thread.start()
                self._drive(programs.supervise(run))
        finally:
            self._finished.set()
            for thread in side:  # all asked first, as AsyncWorker does: they end side by side
                thread.stop()
            for thread in side:
                thread.join()
            self._run = None
        return run.result()

    def stop(self) -> None:
        """Stop the run in progress (safe from any thread and from a signal handler); a second
        call ends the grace at once. Does nothing when no run is in progress."""
        run = self._run
        if run is not None:
            run.request_stop()

    # -- performing the steps ---------------------------------------------------------------
    def _perform(self, step: Step) -> None:
        match step:
            case steps.Perform():
                step.result = steps.perform(step.op, self.transport)
            case steps.Handle():
                step.outcome = outcome_of_call(self.handler, step.lease, self.transport.prefix)
            case steps.Wait():
                event = self._wake if step.wake_on_stop else self._finished
                if step.listen and self._listens:
                    self._wait_or_hear(event, step.seconds, LISTEN_SLICE)
                else:  # SQLite's wait_for_messages only sleeps
                    event.wait(step.seconds)
            case steps.WaitBell():
                if step.idle and self._listens:
                    step.heard = self._wait_or_hear(self._bell, step.seconds, IDLE_BELL_SLICE)
                else:
                    self._bell.wait(step.seconds)
                self._bell.clear()  # the program looks at the run again next: none is missed
            case steps.Take():
                self._woken.get()
            case steps.WaitSlots():
                alive = [t for t in self._slots if t.is_alive()]
                if alive:
                    alive[0].join(step.seconds)
                step.alive = sum(t.is_alive() for t in self._slots)
            case steps.Abandon():
                pass  # slot threads still running are daemons: they end with the process
            case _:
                assert_never(step)

    def _wait_or_hear(self, event: threading.Event, seconds: float, piece: float) -> bool:
        """Wait up to ``seconds`` for ``event`` or for the transport to hear of a message
        (then ``True``), in pieces of ``piece`` seconds, between which ``event`` is seen."""
        deadline = time.monotonic() + seconds
        while not event.is_set() and (left := deadline - time.monotonic()) > 0:
            if self.transport.wait_for_messages(min(left, piece)):
                return True
        return False

    def _wake_slots(self, slots: int) -> None:
        for _ in range(slots):
            self._woken.put(None)

    # -- the driving -----------------------------------------------------------------------
    def _start(self, run: RunState, program: Routine) -> threading.Thread:
        def slot() -> None:
            # A new thread's context is empty: its handlers' settles are reported from now on.
            settlements.watch(run.settled_by_handler)
            try:
                self._drive(program)
            except BaseException as error:
                run.crashed(error)

        thread = threading.Thread(target=slot, name="harel_sa-slot", daemon=True)
        thread.start()
        return thread

    def _drive(self, program: Routine) -> None:
        """Perform ``program``'s steps until it ends; an exception raised by one goes into the
        program."""
        step = next(program, None)
        while step is not None:
            try:
                self._perform(step)
            except BaseException as error:
                try:
                    step = program.throw(error)
                except StopIteration:
                    return
            else:
                step = next(program, None)


def _both(first: Callable[[], None], then: Callable[[], None]) -> None:
    first()
    then()


@contextmanager
def _signals(enabled: bool, run: RunState) -> Iterator[None]:
    """SIGTERM/SIGINT request a stop while the run lasts; the prior handlers come back."""
    if not on_main_thread(enabled):
        yield
        return
    previous = {
        sig: signal.signal(
            sig, lambda signum, _: run.request_stop(f"{signal.Signals(signum).name} received")
        )
        for sig in SIGNALS
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def on_main_thread(enabled: bool) -> bool:
    """Whether a run should handle signals: asked to, and able to (main thread only)."""
    return enabled and threading.current_thread() is threading.main_thread()

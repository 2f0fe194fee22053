"""``Worker``: the policy of :mod:`harel_sa.worker.policy`, driven by threads.

Each handler slot and the heartbeat is a daemon thread performing its program's steps with
blocking calls on a :class:`~harel_sa.SqliteTransport` (which serializes them); the calling
thread watches the slots, the grace and the signals.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, Unpack

from harel_sa.errors import HarelSAError
from harel_sa.events import E, Lease
from harel_sa.transport import SqliteTransport
from harel_sa.worker.policy import (
    POLL,
    SIGNALS,
    Ack,
    AckAndClaim,
    Claim,
    Handle,
    Nack,
    Program,
    RunState,
    Sleep,
    Step,
    WorkerKwargs,
    WorkerStats,
    checked,
    heartbeat_program,
    on_main_thread,
    options_from,
    slot_program,
)


class Worker(Generic[E]):
    """Runs ``handler(lease)`` on the messages of a :class:`~harel_sa.SqliteTransport`.

    ``handler`` returns to have the message acked, or raises to have it nacked with
    ``backoff.delay(lease.deliveries)``. ``concurrency`` handlers run at once, on threads (the
    transport serializes its calls). The transport stays the caller's: the worker never
    closes it. One :meth:`run` at a time. Options: :class:`WorkerKwargs`.
    """

    def __init__(
        self,
        transport: SqliteTransport[E],
        handler: Callable[[Lease[E]], None],
        **kwargs: Unpack[WorkerKwargs],
    ) -> None:
        self.transport, self.handler = checked(transport, SqliteTransport, handler)
        self.options, self.handle_signals = options_from(kwargs)
        self._state: RunState | None = None
        self._wake = threading.Event()
        self._finished = threading.Event()

    def run(self, *, max_messages: int | None = None, until_empty: bool = False) -> WorkerStats:
        """Work until stopped (:meth:`stop`, SIGTERM, SIGINT); return what was done.

        Also returns after ``max_messages`` claims were handled, or (``until_empty``) once a
        claim finds nothing deliverable (parked messages and other workers' leases are not
        deliverable). On stop, handlers in flight get ``grace`` seconds; what is still held
        then is released with ``nack(0)`` and its handler thread (a daemon) is abandoned: its
        ack will return ``False``. Signals are handled only when called on the main thread.
        A handler that raises ``KeyboardInterrupt`` or ``SystemExit`` stops the run the same
        way; once its lease is released, ``run`` raises that exception again.
        """
        state = RunState(self.options, max_messages, until_empty)
        self._wake, self._finished = threading.Event(), threading.Event()
        state.on_stop = self._wake.set
        self._state = state
        try:
            with _sync_signals(self.handle_signals, state):
                self._run(state)
        finally:
            self._state = None
        state.raise_fatal()
        return state.stats()

    def stop(self) -> None:
        """Stop the run in progress (safe from any thread and from a signal handler); a second
        call ends the grace at once. Does nothing when no run is in progress."""
        state = self._state
        if state is not None:
            state.request_stop()

    def _run(self, state: RunState) -> None:
        slots = [self._start(state, slot_program(state)) for _ in range(self.options.concurrency)]
        beat = self._start(state, heartbeat_program(state))
        try:
            while (alive := [t for t in slots if t.is_alive()]) and state.grace_left() != 0:
                alive[0].join(POLL)
            while (alive := [t for t in slots if t.is_alive()]) and not state.may_abandon(
                len(alive)
            ):
                alive[0].join(POLL / 5)
        finally:
            for lease in state.release_all():
                state.released(self._call(state, Nack(lease, 0.0)) is True)
            state.done = True
            self._finished.set()
            beat.join()

    def _start(self, state: RunState, program: Program) -> threading.Thread:
        thread = threading.Thread(target=self._drive, args=(state, program), daemon=True)
        thread.start()
        return thread

    def _drive(self, state: RunState, program: Program) -> None:
        """Perform ``program``'s steps on this thread until it ends."""
        result: object = None
        try:
            while True:
                result = self._call(state, program.send(result))
        except StopIteration:
            pass
        except BaseException as exc:
            state.crashed(exc)

    def _call(self, state: RunState, step: Step) -> object:
        if isinstance(step, Sleep):
            (self._wake if step.wake_on_stop else self._finished).wait(step.seconds)
            return None
        if isinstance(step, Handle):
            try:
                self.handler(step.lease)
            except Exception as exc:
                return exc
            return None
        t, args = self.transport, self.options.claim_args()
        try:
            if isinstance(step, Claim):
                return t.claim(**args)
            if isinstance(step, AckAndClaim):
                return t.ack_and_claim(step.lease, **args)
            if isinstance(step, Ack):
                return t.ack(step.lease)
            if isinstance(step, Nack):
                return t.nack(step.lease, step.delay)
            return t.extend(step.lease, self.options.visibility)
        except HarelSAError as exc:
            return state.transport_failed(step, exc)


@contextmanager
def _sync_signals(enabled: bool, state: RunState) -> Iterator[None]:
    """SIGTERM/SIGINT request a stop while the run lasts; the prior handlers come back."""
    if not on_main_thread(enabled):
        yield
        return
    previous = {sig: signal.signal(sig, lambda *_: state.request_stop()) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

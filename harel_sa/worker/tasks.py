"""``AsyncWorker``: the policy of :mod:`harel_sa.worker.policy`, driven by asyncio tasks.

Each handler slot and the heartbeat is a task on the running loop performing its program's
steps with awaited calls on an :class:`~harel_sa.AsyncSqliteTransport`; ``run`` watches the
slots, the grace and the signals.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Generic, Unpack

from harel_sa.aio import AsyncSqliteTransport
from harel_sa.errors import HarelSAError
from harel_sa.events import E, Lease
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


class AsyncWorker(Generic[E]):
    """The async twin of :class:`Worker`: ``await handler(lease)`` on an
    :class:`~harel_sa.AsyncSqliteTransport`, ``concurrency`` handler tasks on the running
    loop, the same policy. When the grace runs out, the handler tasks still running are
    cancelled and their leases released with ``nack(0)``. A handler that blocks the loop
    blocks the heartbeat too: keep blocking work in threads (``asyncio.to_thread``).
    """

    def __init__(
        self,
        transport: AsyncSqliteTransport[E],
        handler: Callable[[Lease[E]], Awaitable[None]],
        **kwargs: Unpack[WorkerKwargs],
    ) -> None:
        self.transport, self.handler = checked(transport, AsyncSqliteTransport, handler)
        self.options, self.handle_signals = options_from(kwargs)
        self._state: RunState | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._finished = asyncio.Event()

    async def run(
        self, *, max_messages: int | None = None, until_empty: bool = False
    ) -> WorkerStats:
        """As :meth:`Worker.run`, on the running event loop."""
        state = RunState(self.options, max_messages, until_empty)
        self._loop = loop = asyncio.get_running_loop()
        self._wake, self._finished = asyncio.Event(), asyncio.Event()
        state.on_stop = self._wake.set
        self._state = state
        try:
            with _loop_signals(self.handle_signals, loop, state):
                await self._run(state)
        finally:
            self._state = None
        state.raise_fatal()
        return state.stats()

    def stop(self) -> None:
        """As :meth:`Worker.stop`; safe from any thread (it hops onto the worker's loop)."""
        state, loop = self._state, self._loop
        if state is None or loop is None:
            return
        with suppress(RuntimeError):  # the loop is closed: the run is over
            loop.call_soon_threadsafe(state.request_stop)

    async def _run(self, state: RunState) -> None:
        slots = [
            asyncio.create_task(self._drive(state, slot_program(state)))
            for _ in range(self.options.concurrency)
        ]
        beat = asyncio.create_task(self._drive(state, heartbeat_program(state)))
        try:
            while (alive := {t for t in slots if not t.done()}) and state.grace_left() != 0:
                await asyncio.wait(alive, timeout=POLL)
            while (alive := {t for t in slots if not t.done()}) and not state.may_abandon(
                len(alive)
            ):
                await asyncio.wait(alive, timeout=POLL / 5)
        finally:
            for task in slots:
                task.cancel()
            await asyncio.gather(*slots, return_exceptions=True)
            for lease in state.release_all():
                state.released(await self._call(state, Nack(lease, 0.0)) is True)
            state.done = True
            self._finished.set()
            await beat

    async def _drive(self, state: RunState, program: Program) -> None:
        """Perform ``program``'s steps on this task until it ends (or is cancelled)."""
        result: object = None
        try:
            while True:
                result = await self._call(state, program.send(result))
        except StopIteration:
            pass
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            state.crashed(exc)

    async def _call(self, state: RunState, step: Step) -> object:
        if isinstance(step, Sleep):
            event = self._wake if step.wake_on_stop else self._finished
            with suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), step.seconds)
            return None
        if isinstance(step, Handle):
            try:
                await self.handler(step.lease)
            except Exception as exc:
                return exc
            return None
        t, args = self.transport, self.options.claim_args()
        try:
            if isinstance(step, Claim):
                return await t.claim(**args)
            if isinstance(step, AckAndClaim):
                return await t.ack_and_claim(step.lease, **args)
            if isinstance(step, Ack):
                return await t.ack(step.lease)
            if isinstance(step, Nack):
                return await t.nack(step.lease, step.delay)
            return await t.extend(step.lease, self.options.visibility)
        except HarelSAError as exc:
            return state.transport_failed(step, exc)


@contextmanager
def _loop_signals(
    enabled: bool, loop: asyncio.AbstractEventLoop, state: RunState
) -> Iterator[None]:
    """As :func:`_sync_signals`, through the loop's own signal handling."""
    if not on_main_thread(enabled):
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig in SIGNALS:
        loop.add_signal_handler(sig, state.request_stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            loop.remove_signal_handler(sig)
            signal.signal(sig, handler)

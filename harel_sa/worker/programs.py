"""The worker's programs, written once for both drivers: a slot and the supervisor; with
batching, a batching slot and the batcher instead of the slots (:func:`team`).

A program is a generator of :mod:`~harel_sa.worker.steps`; it asks
:class:`~harel_sa.worker.runstate.RunState` (and a batching run's
:class:`~harel_sa.worker.batches.Batches`) what follows each result and yields what to do
next. It never touches the database, the handler or a thread: a driver performs its steps. An
idle worker waits in one of two places: a slot's :func:`claim` after a claim found nothing
(``Wait(poll_interval, wake_on_stop=True)``), or the batcher's ``WaitBell(..., idle=True)`` after a
claim found fewer messages than it asked for.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

from harel_sa.events import Lease
from harel_sa.worker.batches import Batches, Sleep, Waiting
from harel_sa.worker.operations import Batch, Claim, Done, Nack, Operation, Sent
from harel_sa.worker.runstate import RunState
from harel_sa.worker.steps import (
    Abandon,
    Action,
    Handle,
    Perform,
    Routine,
    SendBatch,
    Serve,
    Take,
    Wait,
    WaitBell,
    WaitSlots,
)

POLL = 0.05  # how often the supervisor looks at the slots and the grace
TAKE = Take()  # no state: one for every wait of every slot


def team(run: RunState, batches: Batches | None) -> list[Routine]:
    """The routines a run's driver starts beside the supervisor, each on a thread or task of
    its own: ``concurrency`` slots; with ``batches``, the batcher, and a :func:`batching_slot`
    each time it starts one (``Batches.on_start``, up to ``concurrency``)."""
    if batches is None:
        return [slot(run) for _ in range(run.options.concurrency)]
    return [batcher(run, batches)]


def batches_for(run: RunState) -> Batches | None:
    """A batching run's shared state (:attr:`WorkerOptions.batching
    <harel_sa.worker.WorkerOptions.batching>`), else ``None``."""
    return Batches(run) if run.options.batching else None


def slot(run: RunState) -> Routine:
    """One handler slot: claim, handle, settle (an ack fused with the next claim); again,
    until the budget, the queue (``until_empty``) or a stop ends it."""
    lease = yield from claim(run)
    while lease is not None:
        op = yield from handle(run, lease)
        following = None if op is None else (yield from settle(run, op))
        lease = following if following is not None else (yield from claim(run))


def claim(run: RunState) -> Generator[Action, None, Lease[Any] | None]:
    """The next lease, or ``None`` when the slot should end. A claim that finds nothing waits
    ``poll_interval`` and tries again (unless ``until_empty``); so does one that fails."""
    while run.reserve():
        call = Perform(Claim(run.options))
        started = time.monotonic()
        yield call
        result = call.result
        if isinstance(result, Done) and result.lease is not None:
            run.claimed(result.lease, time.monotonic() - started)
            return result.lease
        if isinstance(result, Done):
            pause = run.nothing_claimed()
            if pause is None:
                return None
        else:
            run.failed("Claim", result)
            run.unreserve()
            pause = run.options.poll_interval
        # Nothing to claim: the transport may hear of the next message before the pause ends.
        yield Wait(pause, wake_on_stop=True, listen=isinstance(result, Done))
    return None


def handle(run: RunState, lease: Lease[Any]) -> Generator[Action, None, Operation | None]:
    """Run the handler on ``lease``: what to do with the message next (``None``: nothing)."""
    step = Handle(lease)
    run.handling()
    started = time.monotonic()
    yield step
    return run.plan(lease, step.outcome, time.monotonic() - started)


def settle(run: RunState, op: Operation) -> Generator[Action, None, Lease[Any] | None]:
    """Perform ``op``; while the write lock stays busy or the connection is lost, try again
    every ``poll_interval``. The next lease when ``op`` was an ack fused with a claim that
    found one."""
    while True:
        call = Perform(op)
        started = time.monotonic()
        yield call
        result = call.result
        if isinstance(result, Done):
            return run.settled(op, result, time.monotonic() - started)
        if not run.may_retry(op, result):
            return None
        yield Wait(run.options.poll_interval, wake_on_stop=False)
        retry = run.again(op)
        if retry is None:
            return None
        op = retry


def batching_slot(run: RunState, batches: Batches) -> Routine:
    """A slot of a batching run, started at its first wake-up: take the next lease from the
    batcher's tray (waiting for a wake-up while it is empty), handle it, hand an ack back (a
    nack or a dead letter it sends itself); when its ack makes the gathered acks due, send
    them itself, fused with the claim for the free slots; again, until the batcher ends or a
    stop. One :class:`Serve` step handles lease after lease while the tray hands on the next
    with the ack (a lease's handler, its outcome and its ack take one section under the run's
    lock: :meth:`Batches.handled`), so quick handlers cost little more than the call."""
    lease = batches.take(woken=True)
    while True:
        while isinstance(lease, Waiting):
            yield TAKE  # woken when leases are put in the tray, the batcher ends, or a stop
            lease = batches.take(woken=True)
        if lease is None:
            return
        serve = Serve(lease, batches, batches.clock())
        yield serve
        after = serve.after
        if isinstance(after, Batch):
            lease = yield from send(run, batches, after, by_slot=True)
            continue
        if after is not None:
            yield from settle(run, after)
            batches.settled()
        lease = batches.take()


def batcher(run: RunState, batches: Batches) -> Routine:
    """The batching run's acks and claims: one batch at a time, as :meth:`Batches.next`
    decides; a batch that finds the write lock busy is sent again every ``poll_interval``
    (without its claim once stopping)."""
    while True:
        what = batches.next()
        if what is None:
            return
        if isinstance(what, Sleep):
            bell = WaitBell(what.seconds, idle=what.idle)
            yield bell
            if bell.heard:
                batches.heard()
            continue
        yield from send(run, batches, what)


def send(
    run: RunState, batches: Batches, batch: Batch, by_slot: bool = False
) -> Generator[Action, None, Lease[Any] | Waiting | None]:
    """Send ``batch`` until it lands, or is given up; then each batch that came due
    meanwhile. What a slot (``by_slot``) takes next, as :meth:`Batches.take` returns it
    (``None`` for the batcher)."""
    while True:
        step = SendBatch(batch)
        started = time.monotonic()
        yield step
        result = step.result
        if isinstance(result, Sent):
            following = batches.sent(batch, result, time.monotonic() - started, by_slot)
            if isinstance(following, Batch):
                batch = following
                continue
            return following
        if batches.failed(batch, result):
            yield Wait(run.options.poll_interval, wake_on_stop=not batch.leases)
            retry = batches.again(batch)
            if retry is not None:
                batch = retry
                continue
        return batches.take() if by_slot else None


def supervise(run: RunState) -> Routine:
    """Watch the slots until they end; once stopping, give them the grace, then up to
    ``SETTLE`` seconds more for those between two quick calls; abandon the rest; release what
    is still held (``nack(0)``); end the run. The same sequence when ``run()`` itself is
    interrupted while waiting (``KeyboardInterrupt``, a cancelled task), without the grace."""
    wait = WaitSlots(POLL)
    try:
        yield wait
        while wait.alive and run.grace_left() != 0:
            yield wait
        wait.seconds = POLL / 5
        while wait.alive and not run.may_abandon(wait.alive):
            yield wait
    except BaseException as error:  # re-raised by the driver once all is released
        run.interrupted(error)
    yield Abandon()
    for lease in run.release_all():
        call = Perform(Nack(lease, 0.0, release=True))
        yield call
        run.released(lease, call.result)
    run.finish()

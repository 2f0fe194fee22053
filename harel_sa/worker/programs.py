"""The worker's programs, written once for both drivers: the slots, the supervisor and, with
batching, the batcher's routine (:func:`team`).

A program is a generator of :mod:`~harel_sa.worker.steps`: it asks the run (and the batcher)
what follows each result and yields what to do next; a driver performs its steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from functools import partial
from typing import Any, TypeVar, cast

from harel_sa.errors import HarelSAError
from harel_sa.events import Lease
from harel_sa.worker.batcher import Batcher
from harel_sa.worker.handoff import CLOSED, DUE, WAIT, Handoff
from harel_sa.worker.operations import Claim, Done, Nack, Settle, Verdict
from harel_sa.worker.outcomes import RETURNED
from harel_sa.worker.runstate import RunState
from harel_sa.worker.steps import (
    Abandon,
    Handle,
    Perform,
    Routine,
    Step,
    Take,
    Wait,
    WaitBell,
    WaitSlots,
)
from harel_sa.worker.wake import STALL, Wake

WATCH_SLOTS = 0.05  # how often the supervisor looks at the slots and the grace
S = TypeVar("S", bound=Settle)
T = TypeVar("T")
TAKE = Take()  # no state: one for every wait of every slot


def team(
    run: RunState, ring: Callable[[], None], wake: Callable[[int], None]
) -> tuple[list[Routine], Callable[[], None]]:
    """The routines a driver starts beside the supervisor, and what a stop must also do:
    ``concurrency`` slots and, when batching, the batcher, which rings the driver's bell
    (``ring``) and wakes waiting slots (``wake``)."""
    if not run.options.batching:
        return [slot(run) for _ in range(run.options.concurrency)], _nothing
    owner = Batcher(run, Handoff(ring, time.monotonic), Wake())
    owner.on_wake = wake
    return batching(run, owner), owner.stop


def batching(run: RunState, owner: Batcher) -> list[Routine]:
    """A batching run's routines: the batcher's, then ``concurrency`` slots."""
    slots = [batching_slot(run, owner.handoff, owner) for _ in range(run.options.concurrency)]
    return [batcher(run, owner), *slots]


def slot(run: RunState) -> Routine:
    """One slot: claim, handle, settle (an ack fused with the next claim); again, until the
    budget, the queue (``until_empty``) or a stop ends it."""
    lease = yield from claim(run)
    while lease is not None:
        op = yield from handle(run, lease)
        following = None if op is None else (yield from settle(run, op))
        lease = following if following is not None else (yield from claim(run))


def claim(run: RunState) -> Generator[Step, None, Lease[Any] | None]:
    """The next lease, or ``None`` when the slot should end; an empty or failed claim waits
    ``poll_interval`` and tries again."""
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


def handle(run: RunState, lease: Lease[Any]) -> Generator[Step, None, Verdict | None]:
    """Run the handler on ``lease``: what to do with the message next (``None``: nothing)."""
    step = Handle(lease)
    run.handling()
    started = time.monotonic()
    yield step
    return run.plan(lease, step.outcome, time.monotonic() - started)


def settle(run: RunState, op: Verdict) -> Generator[Step, None, Lease[Any] | None]:
    """Send ``op``: the next lease, from an ack fused with a claim."""
    return (yield from sent(run, op, run.settled))


def sent(
    run: RunState, op: S, landed: Callable[[S, Any, float], T]
) -> Generator[Step, None, T | None]:
    """Perform ``op`` until it lands, then ``landed(op, result, seconds)``; after a busy lock or
    a lost connection, again every ``poll_interval`` (once stopping, without its claim);
    ``None`` when given up."""
    while True:
        call: Perform[Any] = Perform(op)
        started = time.monotonic()
        yield call
        result = call.result
        if not isinstance(result, HarelSAError):
            return landed(op, result, time.monotonic() - started)
        if not run.may_retry(op, result):
            return None
        # A claim alone (no lease to settle) is not worth a wait past a stop.
        yield Wait(run.options.poll_interval, wake_on_stop=not op.leases)
        retry = run.again(op)
        if retry is None:
            return None
        op = cast(S, retry)


def batching_slot(run: RunState, handoff: Handoff, owner: Batcher) -> Routine:
    """A batching slot: take a lease from the handoff (waiting while none waits) and handle it;
    give it back when its handler returned (the batcher acks it) and go on with the next; send
    a nack or a dead letter itself. When its ack makes the acks due and no lease waits, it
    takes the batcher's turn and sends them. Until the batcher ends."""
    clock = handoff.clock
    lease = handoff.take()
    while True:
        while lease == WAIT:
            yield TAKE
            lease = handoff.take(woken=True)
        if not isinstance(lease, Lease):
            return
        run.handling()
        step = Handle(lease)
        started = clock()
        yield step
        now = clock()
        owner.wake.ended(now - started)
        run.handler_took(now - started)
        # A handler that raised leaves its message to the slot, as a closed handoff does.
        given = handoff.give(lease, now) if step.outcome is RETURNED else CLOSED
        if isinstance(given, Lease):
            lease = given
            continue
        if given == DUE:
            if owner.take_turn():
                yield from turn(run, owner)
            else:  # its holder looks again when it lets go; the bell is for the routine
                handoff.ring()
        elif given == CLOSED:
            op = run.plan(lease, step.outcome, None)  # its time is told
            if op is not None:
                yield from settle(run, op)
            handoff.freed()
        lease = handoff.take()


def batcher(run: RunState, b: Batcher) -> Routine:
    """The batcher's routine: take the turn when rung or at a timer, send what is due, sleep;
    until the run claims no more and nothing is out, or the grace is over."""
    while True:
        if not b.take_turn():
            # Its holder, a slot sending a batch, looks again when it lets go, and rings for
            # a timer sooner than this nap's end.
            b.asleep_until = b.handoff.clock() + STALL
            yield WaitBell(STALL)
            continue
        yield from sends(run, b, by_slot=False)
        now = b.handoff.clock()
        bell = None if run.done else b.sleep(now)
        if bell is None:
            b.close()
            return
        if b.let_go(now):
            continue
        yield bell
        if bell.heard:
            b.short_until = 0.0


def turn(run: RunState, b: Batcher) -> Generator[Step, None, None]:
    """A slot's turn (taken): send the acks due, let go, and again should more come due."""
    while True:
        yield from sends(run, b, by_slot=True)
        if not b.let_go(b.handoff.clock(), taking=1) or not b.take_turn():
            return


def sends(run: RunState, b: Batcher, by_slot: bool) -> Generator[Step, None, None]:
    """The turn's work: collect what came back, send the batches due."""
    while True:
        b.collect()
        if run.done:
            return
        batch = b.next_batch(b.handoff.clock())
        if batch is None:
            return
        yield from sent(run, batch, partial(b.landed, by_slot=by_slot))


def supervise(run: RunState) -> Routine:
    """Watch the slots until they end; once stopping, give them the grace (and ``SETTLE`` for
    a quick call in flight), abandon the rest, release what is held (``nack(0)``) and end the
    run. The same, without the grace, when ``run()`` itself is interrupted."""
    wait = WaitSlots(WATCH_SLOTS)
    try:
        yield wait
        while wait.alive and run.grace_left() != 0:
            yield wait
        wait.seconds = WATCH_SLOTS / 5
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


def _nothing() -> None:
    pass

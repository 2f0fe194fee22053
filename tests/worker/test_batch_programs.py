"""The batching programs (the batcher's routine and its slots), driven step by step with no
database and no thread: what each batch holds, who sends it and when, and what the run counts."""

from __future__ import annotations

from typing import Any

import pytest

from harel_sa import BusyError, Event, InvalidArgumentError, Lease
from harel_sa.worker import WorkerOptions
from harel_sa.worker import programs as p
from harel_sa.worker.batcher import Batcher
from harel_sa.worker.handoff import Handoff
from harel_sa.worker.operations import Ack, Batch, Done, Nack, Sent
from harel_sa.worker.outcomes import RETURNED, Outcome, Raised
from harel_sa.worker.runstate import RunState
from harel_sa.worker.steps import Handle, Perform, Routine, Step, Take, Wait, WaitBell
from harel_sa.worker.wake import STALL, Wake
from tests.conftest import FakeClock

OPTIONS = WorkerOptions(worker_id="w", concurrency=3, batch=3, ack_wait=60.0, visibility=120.0)
SLOW = 1.0  # a handler's seconds that are not quick

LEASES = {n: Lease(n, f"g{n}", Event(kind="job"), "w", f"t{n}", 1) for n in range(1, 10)}


def lease(seq: int) -> Lease[Event]:
    return LEASES[seq]


class Team:
    """A batching run's routine and slots, each stepped by hand; the wake-ups the batcher gives
    waiting slots are counted, and handed out only by :meth:`drive`, as a driver would. Every
    slot starts and waits (``Take``) before the first batch."""

    def __init__(self, options: WorkerOptions = OPTIONS, **run: Any) -> None:
        self.run = RunState(options, run.get("max_messages"), run.get("until_empty", False))
        self.clock = FakeClock()
        self.owner = Batcher(self.run, Handoff(self._ring, self.clock), Wake())
        self.owner.on_wake = self._wake
        self.run.on_stop = self.owner.stop  # as the drivers do
        self.batcher, *self.slots = p.batching(self.run, self.owner)
        self.rang = 0  # the routine's bell
        self.tokens = 0  # wake-ups given, not yet handed to a waiting slot
        self.given = 0  # wake-ups given in all
        self.at: dict[int, Step | None] = {}
        for k in range(1, len(self.slots) + 1):
            self.step(k)

    def _ring(self) -> None:
        self.rang += 1

    def _wake(self, slots: int) -> None:
        self.tokens += slots
        self.given += slots

    def step(self, k: int) -> Step | None:
        """Slot ``k`` goes on (its step was performed): its next step."""
        self.at[k] = next(self.slots[k - 1], None)
        return self.at[k]

    def drive(self) -> dict[int, int]:
        """Hand each wake-up to a slot waiting on ``Take`` (the lowest first); ``{seq: slot}``
        of the slots now handling."""
        while self.tokens and (waiting := [k for k, s in self.at.items() if isinstance(s, Take)]):
            self.tokens -= 1
            self.step(waiting[0])
        return {s.lease.seq: k for k, s in self.at.items() if isinstance(s, Handle)}

    def batch(self) -> Perform[Sent]:
        """The routine's next step: it must be a batch."""
        return sending(next(self.batcher))

    def answer(
        self,
        send: Perform[Sent],
        acked: tuple[bool, ...] = (),
        *leases: Lease[Event],
        slot: int = 0,
    ) -> Step | None:
        """Answer the batch ``send`` (the routine's, or slot ``slot``'s): the sender's next
        step (``None``: it ended)."""
        send.result = Sent(acked, leases)
        return self.step(slot) if slot else next(self.batcher, None)

    def finish(self, k: int, outcome: Outcome = RETURNED, seconds: float = 0.0) -> Step | None:
        """Slot ``k``'s handler ends with ``outcome`` after ``seconds`` (quick unless told): its
        next step (a :class:`Handle` of the next lease, when the handoff handed one on)."""
        step = self.at[k]
        assert isinstance(step, Handle), step
        step.outcome = outcome
        self.clock.advance(seconds)
        return self.step(k)


def sending(step: Step | None) -> Perform[Sent]:
    assert isinstance(step, Perform) and isinstance(step.op, Batch), step
    return step


def quick_batch_on_slot_3(team: Team) -> Step | None:
    """Leases 1-3 go to the three slots, whose quick handlers end in turn; slot 3's ack
    completes the batch, which it sends itself and which brings leases 4-6: its next step."""
    team.answer(team.batch(), (), lease(1), lease(2), lease(3))
    team.drive()
    assert isinstance(team.finish(1), Take) and isinstance(team.finish(2), Take)
    send = sending(team.finish(3))
    assert send.op == Batch((lease(1), lease(2), lease(3)), OPTIONS, 3)
    return team.answer(send, (True,) * 3, lease(4), lease(5), lease(6), slot=3)


def test_one_claim_many_fills_every_free_slot_and_each_gets_one_lease() -> None:
    team = Team()
    assert all(isinstance(s, Take) for s in team.at.values())  # all free, waiting
    claim = team.batch()
    assert claim.op == Batch((), OPTIONS, 3)  # one claim for the three free slots
    assert isinstance(team.answer(claim, (), lease(1), lease(2), lease(3)), WaitBell)
    assert team.given == 3  # no handler has returned yet: each lease wakes a slot
    assert team.drive() == {1: 1, 2: 2, 3: 3}  # a slow handler holds no other lease back
    assert team.run.stats().claimed == 3
    assert {h.seq for h in team.run.held()} == {1, 2, 3}  # the heartbeat extends them


def test_after_quick_handlers_the_slot_that_sends_a_batch_takes_its_leases_alone() -> None:
    team = Team()
    step = quick_batch_on_slot_3(team)
    assert team.given == 3  # no slot woken for the second batch
    watch = next(team.batcher)  # rung to watch instead of its long sleep
    assert isinstance(watch, WaitBell) and watch.seconds == pytest.approx(STALL)
    team.rang = 0
    for seq in (4, 5, 6):  # slot 3 takes lease after lease, its handlers being quick
        assert isinstance(step, Handle) and step.lease.seq == seq
        step = team.finish(3)
    assert sending(step).op == Batch((lease(4), lease(5), lease(6)), OPTIONS, 3)
    assert team.given == 3 and team.rang == 0


def test_a_lease_left_waiting_by_a_handler_turned_slow_gets_a_slot_after_stall() -> None:
    team = Team()
    step = quick_batch_on_slot_3(team)
    assert isinstance(step, Handle) and step.lease.seq == 4  # this handler hangs
    watch = next(team.batcher)  # the routine looks, and watches the leases waiting
    assert isinstance(watch, WaitBell) and watch.seconds == pytest.approx(STALL)
    team.clock.advance(STALL / 2)
    again = next(team.batcher)
    assert isinstance(again, WaitBell) and again.seconds == pytest.approx(STALL / 2)
    assert team.tokens == 0
    team.clock.advance(STALL / 2)
    next(team.batcher)
    assert team.tokens == 2  # one slot for each lease left: 5 and 6
    assert team.drive() == {4: 3, 5: 1, 6: 2}


def test_acks_are_gathered_into_one_batch_counted_only_once_it_committed() -> None:
    team = Team()
    leases = lease(1), lease(2), lease(3)
    team.answer(team.batch(), (), *leases)
    team.drive()
    assert isinstance(team.finish(1, seconds=SLOW), Take)  # two handlers still hold leases
    wait = next(team.batcher)
    assert isinstance(wait, WaitBell) and wait.seconds == 60.0  # the ack's ack_wait
    assert isinstance(team.finish(2, seconds=SLOW), Take)
    team.rang = 0
    send = sending(team.finish(3, seconds=SLOW))  # nobody holds a lease: no other ack comes
    assert send.op == Batch(leases, OPTIONS, 3)  # one commit: three acks, three claims
    assert team.rang == 0  # the last slot sends it: the routine was not woken for it
    assert team.run.stats().succeeded == 0  # not durable yet: nothing counted
    team.answer(send, (True, True, True), slot=3)
    assert team.run.stats().succeeded == 3


def test_an_ack_is_sent_once_it_waited_ack_wait_with_the_claim_for_its_slot() -> None:
    options = WorkerOptions(worker_id="w", concurrency=3, batch=3, ack_wait=0.5)
    team = Team(options)
    assert isinstance(team.answer(team.batch(), (), lease(1), lease(2), lease(3)), WaitBell)
    team.drive()
    team.rang = 0
    assert isinstance(team.finish(1, seconds=0.1), Take)  # it took the turn: not due yet
    assert team.rang == 1  # the routine, asleep for longer than that ack may wait, is told
    wait = next(team.batcher)
    assert isinstance(wait, WaitBell) and wait.seconds == pytest.approx(0.5)
    team.clock.advance(0.5)
    assert team.batch().op == Batch((lease(1),), options, 1)


def test_with_ack_wait_0_an_ack_is_sent_at_once() -> None:
    options = WorkerOptions(worker_id="w", concurrency=2, batch=2, ack_wait=0.0)
    team = Team(options)
    team.answer(team.batch(), (), lease(1), lease(2))
    team.drive()
    send = sending(team.finish(1, seconds=SLOW))  # the other handler still runs: no waiting
    assert send.op == Batch((lease(1),), options, 1)


def test_while_a_slot_sends_a_batch_the_acks_due_meanwhile_go_next_from_it() -> None:
    options = WorkerOptions(worker_id="w", concurrency=3, batch=3, ack_wait=0.0)
    team = Team(options)
    team.answer(team.batch(), (), lease(1), lease(2), lease(3))
    team.drive()
    first = sending(team.finish(1, seconds=SLOW))
    assert first.op == Batch((lease(1),), options, 1)
    team.rang = 0
    assert isinstance(team.finish(2, seconds=SLOW), Take)  # due, but slot 1 has the turn
    assert team.rang == 0  # and looks again after its batch: nobody is rung
    nap = next(team.batcher)
    assert isinstance(nap, WaitBell) and nap.seconds == STALL
    second = sending(team.answer(first, (True,), lease(4), slot=1))
    assert second.op == Batch((lease(2),), options, 1)  # the holder sends what came
    assert isinstance(team.answer(second, (True,), lease(5), slot=1), Handle)
    assert team.run.stats().succeeded == 2


def test_whoever_lets_go_of_the_turn_looks_once_more() -> None:
    team = Team(WorkerOptions(worker_id="w", concurrency=2, batch=2, ack_wait=0.0))
    team.answer(team.batch(), (), lease(1), lease(2))
    team.drive()
    assert team.owner.take_turn()  # the routine holds it (say, between two looks)
    assert isinstance(team.finish(1, seconds=SLOW), Take)  # the slot cannot take it
    assert team.owner.let_go(team.clock()) is True  # so the holder sees the ack on its way


def test_a_lost_lease_in_a_batch_is_counted_lost_the_others_acked() -> None:
    team = Team()
    team.answer(team.batch(), (), lease(1), lease(2), lease(3))
    team.drive()
    team.finish(1)
    team.finish(2)
    send = sending(team.finish(3))
    team.answer(send, (True, False, True), slot=3)
    stats = team.run.stats()
    assert (stats.succeeded, stats.lost) == (2, 1)


def test_a_stop_releases_the_leases_that_no_slot_had_started() -> None:
    team = Team()
    team.answer(team.batch(), (), lease(1), lease(2), lease(3))
    started = team.step(1)  # slot 1 starts its handler; the slots woken have not run yet
    assert isinstance(started, Handle)
    team.run.request_stop()
    assert team.drive() == {1: 1}  # the slots woken find nothing handed out any more
    send = sending(team.finish(1))  # the ack of the one handled, without a claim: stopping
    assert send.op == Batch((started.lease,), OPTIONS, 0)
    assert isinstance(team.answer(send, (True,), slot=1), Take)
    assert next(team.batcher, None) is None  # nothing out any more: the routine ends
    team.drive()
    assert all(step is None for step in team.at.values())  # and every slot with it
    supervise = p.supervise(team.run)
    step = next(supervise)
    step.alive = 0  # type: ignore[union-attr]
    next(supervise)  # abandon
    released = []
    while (release := next(supervise, None)) is not None:
        assert isinstance(release, Perform) and isinstance(release.op, Nack) and release.op.release
        release.result = Done(True)
        released.append(release.op.lease)
    assert sorted(r.seq for r in released) == [2, 3]
    stats = team.run.stats()
    assert (stats.claimed, stats.succeeded, stats.released) == (3, 1, 2)


def test_max_messages_caps_every_claim_and_gives_back_what_a_claim_did_not_find() -> None:
    team = Team(max_messages=4)
    claim = team.batch()
    assert claim.op.limit == 3
    team.answer(claim, (), lease(1), lease(2), lease(3))
    team.drive()
    team.finish(1)
    team.finish(2)
    send = sending(team.finish(3))
    assert send.op == Batch((lease(1), lease(2), lease(3)), OPTIONS, 1)  # 1 left of 4
    team.answer(send, (True, True, True), slot=3)  # it found none: the 1 comes back
    team.owner.short_until = 0.0  # a message came: the idle poll is over
    again = team.batch()
    assert again.op == Batch((), OPTIONS, 1)
    team.answer(again, (), lease(4))
    k = team.drive()[4]
    last = sending(team.finish(k))
    assert last.op == Batch((lease(4),), OPTIONS, 0)  # the budget is spent: no claim
    team.answer(last, (True,), slot=k)
    assert next(team.batcher, None) is None  # nothing more to claim: the routine ends
    assert (team.run.stats().claimed, team.run.stats().succeeded) == (4, 4)


def test_a_busy_batch_is_sent_again_and_loses_its_claim_once_stopping() -> None:
    team = Team()
    team.answer(team.batch(), (), lease(1))
    k = team.drive()[1]
    send = sending(team.finish(k))
    send.result = BusyError("database is locked")
    assert team.step(k) == Wait(OPTIONS.poll_interval, wake_on_stop=False)
    again = sending(team.step(k))
    assert again.op == send.op  # the same batch, again
    again.result = BusyError("database is locked")
    assert isinstance(team.step(k), Wait)
    team.run.request_stop()
    plain = sending(team.step(k))
    assert plain.op == Batch((lease(1),), OPTIONS, 0)
    team.answer(plain, (True,), slot=k)
    stats = team.run.stats()
    assert (stats.succeeded, stats.lost) == (1, 0)


def test_a_nack_is_sent_by_its_slot_and_frees_it_for_the_next_claim() -> None:
    team = Team()
    team.answer(team.batch(), (), lease(1))
    k = team.drive()[1]
    nack = team.finish(k, Raised(ValueError("boom")))
    assert isinstance(nack, Perform) and isinstance(nack.op, Nack)
    nack.result = Done(True)
    team.rang = 0
    assert isinstance(team.step(k), Take)  # free again, and it tells the routine
    assert team.rang == 1
    idle = next(team.batcher)  # the last claim found fewer than asked: the idle poll first
    assert isinstance(idle, WaitBell) and idle.idle and 0 < idle.seconds <= OPTIONS.poll_interval
    assert team.run.stats().failed == 1
    team.owner.short_until = 0.0  # a message came: claim at once
    assert team.batch().op == Batch((), OPTIONS, 3)  # for every slot: none holds a lease


def test_until_empty_ends_once_a_claim_finds_nothing_and_no_handler_runs() -> None:
    team = Team(until_empty=True)
    team.answer(team.batch(), (), lease(1))
    k = team.drive()[1]
    send = sending(team.finish(k))
    assert isinstance(team.answer(send, (True,), slot=k), Take)  # the claim found nothing
    assert next(team.batcher, None) is None  # the routine ends the run
    team.drive()
    assert all(step is None for step in team.at.values())  # every slot ended


def test_until_empty_goes_on_while_a_handler_may_free_its_group() -> None:
    team = Team(until_empty=True)
    team.answer(team.batch(), (), lease(1))  # a deep group: one lease of three asked for
    k = team.drive()[1]
    team.clock.advance(OPTIONS.poll_interval)
    again = team.batch()  # the poll is over: claim for the two free slots
    assert again.op == Batch((), OPTIONS, 2)
    idle = team.answer(again, ())  # nothing, but lease 1's group is busy: not the end
    assert isinstance(idle, WaitBell) and idle.idle
    fused = sending(team.finish(k))
    assert fused.op == Batch((lease(1),), OPTIONS, 1)  # it frees the group's next
    team.answer(fused, (True,), lease(2), slot=k)
    assert team.run.stats().claimed == 2


def test_one_slot_or_batch_1_keeps_the_unbatched_programs() -> None:
    for options in (
        WorkerOptions(concurrency=1, batch=32),
        WorkerOptions(concurrency=4, batch=1),
    ):
        run = RunState(options, None, False)
        routines, _ = p.team(run, lambda: None, lambda slots: None)
        assert len(routines) == options.concurrency
        program: Routine = routines[0]
        assert isinstance(next(program), Perform)  # a plain claim, as before batching


@pytest.mark.parametrize(
    "bad",
    [{"batch": 0}, {"batch": 2.0}, {"ack_wait": -1.0}, {"ack_wait": 30.0, "visibility": 30.0}],
)
def test_batch_options_are_checked_once(bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        WorkerOptions(**bad)


def test_a_deep_group_goes_lease_after_lease_on_one_slot_without_waking_the_routine() -> None:
    team = Team()
    team.answer(team.batch(), (), lease(1))  # one group: one lease of the three asked for
    idle = next(team.batcher)
    assert isinstance(idle, WaitBell) and idle.idle  # it polls for the free slots later
    k = team.drive()[1]
    team.rang = 0
    for seq in (2, 3, 4):
        send = sending(team.finish(k))  # the slot sends its ack fused with the next claim
        assert send.op.limit == 1  # during the idle poll: no more leases than it acks
        step = team.answer(send, (True,), lease(seq), slot=k)  # short again: one lease
        assert isinstance(step, Handle) and step.lease.seq == seq  # the same slot handles it
    assert team.rang == 0  # the routine is not woken for the slot's batches
    assert team.given == 1  # nor another slot: the sender takes its one lease itself
    assert team.run.stats().succeeded == 3
    wait = next(team.batcher)  # one lease out: no ack can be held back, no watch
    assert isinstance(wait, WaitBell) and wait.seconds > STALL


def test_a_slot_goes_on_after_a_failed_handler_and_gathers_the_next_ack() -> None:
    team = Team()
    team.answer(team.batch(), (), lease(1), lease(2), lease(3))
    first = team.step(1)
    assert isinstance(first, Handle)
    retry = team.finish(1, Raised(ValueError("boom")))  # the first handler fails: a nack
    assert isinstance(retry, Perform) and isinstance(retry.op, Nack)
    retry.result = Done(True)
    second = team.step(1)
    assert isinstance(second, Handle) and second.lease.seq == 2
    assert isinstance(team.finish(1, seconds=SLOW), Handle)  # its ack is given back
    stats = team.run.stats()
    assert (stats.failed, stats.succeeded) == (1, 0)
    next(team.batcher)
    assert team.owner.acks == [lease(2)]


def test_a_handler_that_settles_its_own_lease_frees_its_slot_for_the_next_claim() -> None:
    team = Team()
    team.answer(team.batch(), (), lease(1))
    k = team.drive()[1]
    team.run.settled_by_handler(lease(1), "acked", 0.0)  # the handler acked it itself
    assert isinstance(team.finish(k), Take)  # nothing for the slot to send
    assert team.owner.acks == [] and team.owner.out == 0
    team.owner.short_until = 0.0  # past the idle poll
    assert team.batch().op == Batch((), OPTIONS, 3)  # for all three slots again
    assert team.run.stats().succeeded == 1


def test_once_the_batcher_is_done_a_returned_handler_sends_its_own_ack() -> None:
    options = WorkerOptions(
        worker_id="w", concurrency=3, batch=3, ack_wait=60.0, visibility=120.0, grace=0.0
    )
    team = Team(options)
    team.answer(team.batch(), (), lease(1))
    k = team.drive()[1]
    team.run.request_stop()  # no grace: the routine ends with the handler still running
    assert next(team.batcher, None) is None
    ack = team.finish(k)
    assert isinstance(ack, Perform) and ack.op == Ack(lease(1), options, fused=False)
    ack.result = Done(True)
    assert team.step(k) is None
    assert team.run.stats().succeeded == 1


def test_a_lease_taken_from_the_exchange_counts_as_in_its_handler() -> None:
    team = Team()
    team.answer(team.batch(), (), lease(1))
    team.drive()
    team.run.request_stop()
    assert team.run.may_abandon(1)  # the one slot left is inside its handler
    assert not team.run.may_abandon(2)


# -- the wake policy, apart -------------------------------------------------------------------
def test_before_any_quick_handler_each_waiting_lease_wakes_a_slot() -> None:
    wake = Wake()
    assert wake.on_put(waiting=3, woken=1, busy=0) == 2
    assert wake.stalled(3, 0, moved_at=0.0, now=100.0) == 0
    assert wake.watch(3, 0, 0.0, 0.0, out=3) is None


def test_after_a_quick_handler_one_slot_is_woken_and_more_only_after_stall() -> None:
    wake = Wake()
    wake.quick = True
    assert wake.on_put(waiting=3, woken=0, busy=0) == 1
    assert wake.on_put(waiting=3, woken=1, busy=0) == 0  # one on its way (or the sender)
    assert wake.on_put(waiting=3, woken=0, busy=1) == 0  # a slot in a quick handler takes it
    assert wake.stalled(3, 1, moved_at=0.0, now=STALL * 0.9) == 0
    assert wake.stalled(3, 1, moved_at=0.0, now=STALL) == 2
    assert wake.watch(3, 1, moved_at=0.0, now=STALL / 4, out=3) == pytest.approx(STALL * 0.75)
    assert wake.watch(0, 0, 0.0, 0.0, out=2) == STALL  # an ack may be held back
    assert wake.watch(0, 0, 0.0, 0.0, out=1) is None  # its ack makes the batch whole

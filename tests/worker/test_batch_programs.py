"""The batching programs (the batcher and its slots), driven step by step with no database and
no thread: what each batch holds, who sends it and when, and what the run counts."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from harel_sa import BusyError, Event, InvalidArgumentError, Lease
from harel_sa.worker import WorkerOptions
from harel_sa.worker import batches as b
from harel_sa.worker import programs as p
from harel_sa.worker.operations import Ack, Batch, Nack, Sent
from harel_sa.worker.outcomes import RETURNED, Raised
from harel_sa.worker.runstate import RunState
from harel_sa.worker.steps import Action, Perform, Routine, SendBatch, Serve, Take, Wait, WaitBell
from tests.conftest import FakeClock

OPTIONS = WorkerOptions(worker_id="w", concurrency=3, batch=3, ack_wait=60.0, visibility=120.0)


LEASES = {n: Lease(n, f"g{n}", Event(kind="job"), "w", f"t{n}", 1) for n in range(1, 10)}


def lease(seq: int) -> Lease[Event]:
    return LEASES[seq]


class Team:
    """A batching run's batcher and slots, each stepped by hand; the wake-ups the run gives
    (to waiting slots, or starting one) are counted, and handed out only by :meth:`drive`
    or :meth:`step`, as a driver would. Slots are numbered in the order they start."""

    def __init__(self, options: WorkerOptions = OPTIONS, **run: Any) -> None:
        self.run = RunState(options, run.get("max_messages"), run.get("until_empty", False))
        batches = p.batches_for(self.run)
        assert batches is not None
        self.batches = batches
        self.run.on_stop = batches.wake_all  # as the drivers do
        self.clock = self.batches.clock = FakeClock()  # a handler takes no time unless told
        [self.batcher] = p.team(self.run, batches)  # the slots start at their first wake-up
        self.slots: list[Routine] = []
        self.rang = 0  # the batcher's bell
        self.tokens = 0  # wake-ups given to waiting slots, not yet handed to one
        self.starts = 0  # slots to start, not started yet
        self.given = 0  # wake-ups given in all (starts included)
        batches.on_ring = self._ring
        batches.on_wake = self._wake
        batches.on_start = self._start
        self.at: dict[int, Action | None] = {}

    @property
    def wakes(self) -> int:
        """Wake-ups given and not handed out yet (starts included)."""
        return self.tokens + self.starts

    def _ring(self) -> None:
        self.rang += 1

    def _wake(self, slots: int) -> None:
        self.tokens += slots
        self.given += slots

    def _start(self, slots: int) -> None:
        self.starts += slots
        self.given += slots

    def step(self, k: int) -> Action | None:
        """Slot ``k`` goes on (its step was performed), or starts (the next to): its next
        step."""
        if k == len(self.slots) + 1:
            assert self.starts, "no slot was started"
            self.starts -= 1
            self.slots.append(p.batching_slot(self.run, self.batches))
        self.at[k] = next(self.slots[k - 1], None)
        return self.at[k]

    def drive(self) -> dict[int, int]:
        """Hand each wake-up to a slot waiting on ``Take`` (the lowest first), start a slot
        for each start; ``{seq: slot}`` of the slots now handling."""
        while True:
            waiting = [k for k, s in self.at.items() if isinstance(s, Take)]
            if self.tokens and waiting:
                self.tokens -= 1
                self.step(waiting[0])
            elif self.starts:
                self.step(len(self.slots) + 1)
            else:
                return {s.lease.seq: k for k, s in self.at.items() if isinstance(s, Serve)}

    def batch(self) -> SendBatch:
        """The batcher's next step: it must be a batch."""
        step = next(self.batcher)
        assert isinstance(step, SendBatch), step
        return step

    def answer(
        self, send: SendBatch, acked: tuple[bool, ...] = (), *leases: Lease[Event], slot: int = 0
    ) -> Action | None:
        """Answer the batch ``send`` (the batcher's, or slot ``slot``'s): the sender's next
        step (``None``: it ended)."""
        send.result = Sent(acked, leases)
        return self.step(slot) if slot else next(self.batcher, None)

    def finish(self, k: int, outcome: Any = None) -> Action | None:
        """Slot ``k``'s handler ends (returned, unless ``outcome``): its next step (the same
        :class:`Serve`, on the next lease, when the tray handed one on with the ack)."""
        step = self.at[k]
        assert isinstance(step, Serve), step
        if not step.ended(RETURNED if outcome is None else outcome):
            return step
        return self.step(k)


def sending(step: Action | None) -> SendBatch:
    assert isinstance(step, SendBatch), step
    return step


def test_one_claim_many_fills_every_free_slot_and_each_gets_one_lease() -> None:
    team = Team()
    assert all(isinstance(s, Take) for s in team.at.values())  # all free, waiting
    claim = team.batch()
    assert claim.batch == Batch((), OPTIONS, 3)  # one claim for the three free slots
    leases = lease(1), lease(2), lease(3)
    assert isinstance(team.answer(claim, (), *leases), WaitBell)  # the batcher waits for acks
    assert team.wakes == 1  # one slot is woken; each that takes wakes the next
    handling = team.drive()  # three handlers at once: a slow one holds no other lease back
    assert handling == {1: 1, 2: 2, 3: 3} and team.given == 3
    assert team.run.stats().claimed == 3
    assert {h.seq for h in team.run.held()} == {1, 2, 3}  # the heartbeat extends them


def test_a_slot_with_quick_handlers_takes_lease_after_lease_without_waiting() -> None:
    team = Team()
    team.answer(team.batch(), (), lease(1), lease(2), lease(3))
    team.step(1)  # started for the leases; the slot it wakes does not run before it is done
    for seq in (2, 3):  # slot 1's handler returns: the tray's next lease is its next step
        step = team.finish(1)
        assert isinstance(step, Serve) and step.lease.seq == seq
    send = sending(team.finish(1))  # its ack completes the batch: it sends it itself
    assert send.batch == Batch((lease(1), lease(2), lease(3)), OPTIONS, 3)
    # Two wake-ups: one when the leases came (slot 1), one more when slot 1 took the first
    # with leases left (no handler had returned yet: it might be slow); none after that
    # while the slot woken has not looked yet.
    assert team.given == 2


def test_slots_start_at_their_first_wake_up_so_quick_handlers_start_few() -> None:
    options = WorkerOptions(worker_id="w", concurrency=6, batch=6)
    team = Team(options)
    assert team.slots == [] and team.wakes == 0  # nothing to do yet: no slot started
    team.answer(team.batch(), (), *(lease(n) for n in range(1, 7)))
    assert team.starts == 1  # one slot started for the leases
    team.step(1)  # it takes lease 1 and, no handler having returned, starts another
    assert team.starts == 1
    for seq in range(2, 7):  # slot 1's handlers are quick: it takes the others itself
        step = team.finish(1)
        assert isinstance(step, Serve) and step.lease.seq == seq
    send = sending(team.finish(1))
    assert team.drive() == {}  # the slot started meanwhile finds the tray empty and waits
    step = team.answer(send, (True,) * 6, lease(7), lease(8), lease(9), slot=1)
    assert isinstance(step, Serve) and step.lease.seq == 7
    assert team.wakes == 0 and len(team.slots) == 2  # of 6: the sender goes on alone


def second_batch_on_slot_1(team: Team, seconds: float = 0.0) -> tuple[Action | None, int]:
    """Slot 1 handles leases 1 to 3, each in ``seconds``, sends their acks and gets 4 to 6
    back: its next step, and the wake-ups that came with them. The slot woken meanwhile found
    the tray empty and waits again."""
    team.answer(team.batch(), (), lease(1), lease(2), lease(3))
    team.step(1)  # the slot started for the leases: it wakes another, none having returned
    for _ in range(2):
        team.clock.advance(seconds)
        team.finish(1)
    team.clock.advance(seconds)
    send = sending(team.finish(1))
    assert team.drive() == {}  # the other slot woken finds nothing left
    team.rang, given = 0, team.given
    step = team.answer(send, (True,) * 3, lease(4), lease(5), lease(6), slot=1)
    return step, team.given - given


def test_after_a_quick_handler_the_sender_takes_its_batch_alone() -> None:
    team = Team()
    step, woken = second_batch_on_slot_1(team)
    assert woken == 0  # nobody else is woken: the sender takes lease after lease
    assert team.rang == 1  # the batcher, asleep LONG, is told to watch the tray instead
    watch = next(team.batcher)
    assert isinstance(watch, WaitBell) and watch.seconds == pytest.approx(b.STALL)
    for seq in (4, 5, 6):
        assert isinstance(step, Serve) and step.lease.seq == seq
        step = team.finish(1)
    assert isinstance(step, SendBatch) and step.batch.leases == (lease(4), lease(5), lease(6))
    assert team.wakes == 0 and team.rang == 1  # no thread was woken for the whole batch
    team.clock.advance(b.STALL)
    watch = next(team.batcher)  # and while the batch is on its way, it still watches
    assert isinstance(watch, WaitBell) and watch.seconds == pytest.approx(b.STALL)


def test_a_lease_left_in_the_tray_by_a_handler_turned_slow_gets_a_slot_after_stall() -> None:
    team = Team()
    step, _ = second_batch_on_slot_1(team)
    assert isinstance(step, Serve) and step.lease.seq == 4  # this handler hangs
    watch = next(team.batcher)
    assert isinstance(watch, WaitBell) and watch.seconds == pytest.approx(b.STALL)
    team.clock.advance(b.STALL / 2)
    again = next(team.batcher)  # not yet: it looks again when lease 5 has waited STALL
    assert isinstance(again, WaitBell) and again.seconds == pytest.approx(b.STALL / 2)
    assert team.wakes == 0
    team.clock.advance(b.STALL / 2)
    next(team.batcher)
    assert team.wakes == 2  # one slot for each lease left: 5 and 6
    assert team.drive() == {4: 1, 5: 2, 6: 3}
    assert team.wakes == 0  # and no chain after that: every lease had its slot


def test_after_a_stop_no_slot_starts_even_for_leases_left_in_the_tray() -> None:
    team = Team()
    step, _ = second_batch_on_slot_1(team)
    assert isinstance(step, Serve) and step.lease.seq == 4  # this handler hangs
    assert len(team.slots) == 2  # the third slot of three never started
    team.run.request_stop()  # the waiting slot is woken (and ends)
    assert team.wakes == 1
    team.clock.advance(b.STALL)
    next(team.batcher)  # leases 5 and 6 waited STALL, but a stop starts nothing
    assert team.wakes == 1 and team.drive() == {4: 1} and len(team.slots) == 2


def test_after_a_slow_handler_each_lease_left_wakes_a_slot_in_turn() -> None:
    team = Team()
    step, woken = second_batch_on_slot_1(team, b.QUICK)  # as long as a wake-up costs: slow
    assert isinstance(step, Serve) and step.lease.seq == 4
    assert woken == 1  # a wake-up for the leases left; the slot woken wakes the next
    assert team.drive() == {4: 1, 5: 2, 6: 3}


def test_the_first_ack_rings_the_batcher_only_when_it_sleeps_past_ack_wait() -> None:
    options = WorkerOptions(worker_id="w", concurrency=3, batch=3, ack_wait=0.5)
    team = Team(options)
    team.answer(team.batch(), (), lease(1), lease(2), lease(3))
    team.drive()
    team.rang = 0
    team.finish(1)
    assert team.rang == 1  # asleep LONG (1 s): it must time the 0.5 s from this ack
    wait = next(team.batcher)
    assert isinstance(wait, WaitBell) and wait.seconds == 0.5
    team.clock.advance(0.5)
    due = next(team.batcher)  # lease 1's ack waited ack_wait: sent with what is gathered
    assert isinstance(due, SendBatch) and due.batch.leases == (lease(1),)


def test_after_quick_handlers_the_first_ack_leaves_the_watching_batcher_asleep() -> None:
    options = WorkerOptions(worker_id="w", concurrency=3, batch=3, ack_wait=b.STALL / 4)
    team = Team(options)
    step, _ = second_batch_on_slot_1(team)
    assert team.rang == 1  # told to watch the tray, as before
    watch = next(team.batcher)
    assert isinstance(watch, WaitBell) and watch.seconds == pytest.approx(b.STALL)
    team.rang = 0
    assert isinstance(step, Serve) and step.lease.seq == 4
    step = team.finish(1)  # the first ack of this batch; lease 5's handler hangs
    assert isinstance(step, Serve) and step.lease.seq == 5
    assert team.rang == 0  # the batcher wakes within STALL anyway: no ring for each batch
    team.clock.advance(b.STALL)
    due = next(team.batcher)  # it wakes: lease 4's ack waited past ack_wait, sent now
    assert isinstance(due, SendBatch) and due.batch.leases == (lease(4),)
    assert team.wakes == 1  # and lease 6, left in the tray STALL, gets a slot


def quick_team_with_slots_3_and_4_busy(monkeypatch: pytest.MonkeyPatch) -> tuple[Team, SendBatch]:
    """Every handler quick, ``ack_wait`` under ``STALL``: slots 1 and 2 handle leases 1 and 2
    while slots 3 and 4 keep leases 3 and 4; slot 2 sends their acks and the claim for two."""
    monkeypatch.setattr(b, "QUICK", 1.0)
    options = WorkerOptions(worker_id="w", concurrency=4, batch=4, ack_wait=b.STALL / 4)
    team = Team(options)
    team.answer(team.batch(), (), lease(1), lease(2), lease(3), lease(4))
    assert team.drive() == {1: 1, 2: 2, 3: 3, 4: 4}
    team.finish(1)
    team.clock.advance(options.ack_wait)
    send = sending(team.finish(2))  # lease 1's ack waited ack_wait: slot 2 sends
    assert send.batch == Batch((lease(1), lease(2)), options, 2)
    return team, send


def test_after_quick_handlers_the_acks_of_a_drained_tray_ring_the_batcher_by_ack_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A slot whose quick handler leaves the tray empty does not look at the acks again: they
    wait ``ack_wait``, not until the watching batcher's next look (up to ``STALL``)."""
    team, send = quick_team_with_slots_3_and_4_busy(monkeypatch)
    step = team.answer(send, (True, True), lease(5), lease(6), slot=2)
    assert isinstance(step, Serve) and step.lease.seq == 5  # the sender goes on with the tray
    watch = next(team.batcher)  # lease 6 waits in the tray: the batcher watches
    assert isinstance(watch, WaitBell) and watch.seconds == pytest.approx(b.STALL)
    team.rang = 0
    step = team.finish(2)  # the first ack: the slot looks at it again after lease 6
    assert isinstance(step, Serve) and step.lease.seq == 6 and team.rang == 0
    assert isinstance(team.finish(2), Take)  # the tray is empty; leases 3 and 4 are out
    assert team.rang == 1  # the batcher would sleep past ack_wait: rung to time it
    wait = next(team.batcher)
    assert isinstance(wait, WaitBell) and wait.seconds == pytest.approx(team.run.options.ack_wait)
    team.clock.advance(team.run.options.ack_wait)
    assert sending(next(team.batcher)).batch.leases == (lease(5), lease(6))


def test_an_ack_while_a_batch_is_on_its_way_leaves_the_batcher_to_its_sender(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The batcher sends nothing while a batch is on its way: an ack gathered meanwhile does
    not ring it; the batch's sender does when the batch has landed."""
    team, send = quick_team_with_slots_3_and_4_busy(monkeypatch)
    watch = next(team.batcher)  # slot 2's batch may bring leases: the batcher watches
    assert isinstance(watch, WaitBell) and watch.seconds == pytest.approx(b.STALL)
    team.rang = 0
    assert isinstance(team.finish(3), Take)  # lease 3's ack, not due (lease 4 is out)
    assert team.rang == 0  # though the batcher sleeps past its ack_wait
    team.answer(send, (True, True), slot=2)  # it brought nothing
    assert team.rang == 1  # its sender rings for the ack gathered meanwhile


def test_acks_are_gathered_into_one_batch_counted_only_once_it_committed() -> None:
    team = Team()
    leases = lease(1), lease(2), lease(3)
    team.answer(team.batch(), (), *leases)
    team.drive()
    team.rang = 0
    assert isinstance(team.finish(1), Take)  # two handlers still hold leases: it waits
    assert team.rang == 0  # the batcher wakes (LONG) before this ack waited ack_wait anyway
    wait = next(team.batcher)
    assert isinstance(wait, WaitBell) and wait.seconds == 60  # then sleeps until ack_wait is up
    assert isinstance(team.finish(2), Take)
    send = sending(team.finish(3))  # nobody holds a lease any more: no other ack is coming
    assert send.batch == Batch(leases, OPTIONS, 3)  # one commit: three acks, three claims
    assert team.rang == 0  # the last slot sends it: the batcher was not woken for it
    assert team.run.stats().succeeded == 0  # not durable yet: nothing counted
    team.answer(send, (True, True, True), slot=3)
    assert team.run.stats().succeeded == 3


def test_while_a_batch_is_on_its_way_no_other_is_sent_its_sender_sends_what_came_meanwhile() -> (
    None
):
    options = WorkerOptions(worker_id="w", concurrency=3, batch=3, ack_wait=0.0)
    team = Team(options)
    team.answer(team.batch(), (), lease(1), lease(2), lease(3))
    team.drive()
    first = sending(team.finish(1))  # ack_wait 0: due at once
    assert first.batch == Batch((lease(1),), options, 1)
    assert isinstance(team.finish(2), Take)  # due too, but slot 1's batch is on its way
    assert isinstance(next(team.batcher), WaitBell)  # and the batcher does not send it either
    second = sending(team.answer(first, (True,), lease(4), slot=1))
    assert second.batch == Batch((lease(2),), options, 1)  # the sender sends what came
    assert isinstance(team.answer(second, (True,), lease(5), slot=1), Serve)
    assert team.run.stats().succeeded == 2


def test_with_ack_wait_0_an_ack_is_sent_at_once() -> None:
    options = WorkerOptions(worker_id="w", concurrency=2, batch=2, ack_wait=0.0)
    team = Team(options)
    team.answer(team.batch(), (), lease(1), lease(2))
    team.drive()
    send = sending(team.finish(1))  # the other handler still runs: no waiting for it
    assert send.batch == Batch((lease(1),), options, 1)


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


def test_a_stop_releases_the_leases_in_the_tray_that_no_slot_had_started() -> None:
    team = Team()
    held = lease(1), lease(2), lease(3)
    team.answer(team.batch(), (), *held)
    started = team.step(1)  # slot 1 starts its handler; the others have not run yet
    assert isinstance(started, Serve)
    team.run.request_stop()
    team.drive()  # the slot started for the leases left ends without handling them
    assert team.at[2] is None and len(team.slots) == 2  # and the stop starts no other
    send = sending(team.finish(1))  # the ack of the one handled, without a claim: stopping
    assert send.batch == Batch((started.lease,), OPTIONS, 0)
    assert team.answer(send, (True,), slot=1) is None  # slot 1 ends too
    assert next(team.batcher, None) is None  # nothing out any more: the batcher ends
    supervise = p.supervise(team.run)
    step = next(supervise)
    step.alive = 0  # type: ignore[union-attr]
    next(supervise)  # abandon
    released = []
    while (release := next(supervise, None)) is not None:
        assert isinstance(release, Perform) and isinstance(release.op, Nack) and release.op.release
        release.result = p.Done(True)
        released.append(release.op.lease)
    assert sorted(r.seq for r in released) == [2, 3]
    stats = team.run.stats()
    assert (stats.claimed, stats.succeeded, stats.released) == (3, 1, 2)


def test_max_messages_caps_every_claim_and_gives_back_what_a_claim_did_not_find() -> None:
    team = Team(max_messages=4)
    claim = team.batch()
    assert claim.batch.limit == 3
    team.answer(claim, (), lease(1), lease(2), lease(3))
    team.drive()
    team.finish(1)
    team.finish(2)
    send = sending(team.finish(3))
    assert send.batch == Batch((lease(1), lease(2), lease(3)), OPTIONS, 1)  # 1 left of 4
    team.answer(send, (True, True, True), slot=3)  # it found none: the 1 comes back
    team.batches.heard()  # a message came: claim at once
    again = team.batch()
    assert again.batch == Batch((), OPTIONS, 1)
    team.answer(again, (), lease(4))
    k = team.drive()[4]
    last = sending(team.finish(k))
    assert last.batch == Batch((lease(4),), OPTIONS, 0)  # the budget is spent: no claim
    team.rang = 0
    team.answer(last, (True,), slot=k)
    assert team.rang == 1  # the batcher is told: nothing more to claim, it ends the run
    assert next(team.batcher, None) is None
    assert (team.run.stats().claimed, team.run.stats().succeeded) == (4, 4)


def test_a_busy_batch_is_sent_again_and_loses_its_claim_once_stopping() -> None:
    team = Team()
    team.answer(team.batch(), (), lease(1))
    k = team.drive()[1]
    send = sending(team.finish(k))
    send.result = BusyError("database is locked")
    assert team.step(k) == Wait(OPTIONS.poll_interval, wake_on_stop=False)
    again = sending(team.step(k))
    assert again.batch == send.batch  # the same batch, again
    again.result = BusyError("database is locked")
    assert isinstance(team.step(k), Wait)
    team.run.request_stop()
    plain = sending(team.step(k))
    assert plain.batch == Batch((lease(1),), OPTIONS, 0)
    team.answer(plain, (True,), slot=k)
    stats = team.run.stats()
    assert (stats.succeeded, stats.lost) == (1, 0)


def test_a_nack_is_sent_by_its_slot_and_frees_it_for_the_next_claim() -> None:
    team = Team()
    team.answer(team.batch(), (), lease(1))
    k = team.drive()[1]
    nack = team.finish(k, Raised(ValueError("boom")))
    assert isinstance(nack, Perform) and isinstance(nack.op, Nack)
    nack.result = p.Done(True)
    team.rang = 0
    assert isinstance(team.step(k), Take)  # free again, and it tells the batcher
    assert team.rang == 1
    idle = next(team.batcher)  # the last claim found fewer than asked: the idle poll first
    assert isinstance(idle, WaitBell) and idle.idle and (idle.seconds or 0) <= OPTIONS.poll_interval
    assert team.run.stats().failed == 1
    team.batches.heard()  # a message came: claim at once
    assert team.batch().batch == Batch((), OPTIONS, 3)  # for every slot: none holds a lease


def test_until_empty_ends_once_a_claim_finds_nothing_and_no_handler_runs() -> None:
    team = Team(until_empty=True)
    team.answer(team.batch(), (), lease(1))
    k = team.drive()[1]
    send = sending(team.finish(k))
    team.rang = 0
    assert isinstance(team.answer(send, (True,), slot=k), Take)  # the claim found nothing
    assert team.rang == 1  # the batcher is told: it ends the run
    assert next(team.batcher, None) is None
    team.drive()
    assert all(step is None for step in team.at.values())  # every slot ended


def test_one_slot_or_batch_1_keeps_the_unbatched_programs() -> None:
    for options in (
        WorkerOptions(concurrency=1, batch=32),
        WorkerOptions(concurrency=4, batch=1),
    ):
        run = RunState(options, None, False)
        assert p.batches_for(run) is None and len(p.team(run, None)) == options.concurrency
        program: Routine = p.team(run, None)[0]
        assert isinstance(next(program), Perform)  # a plain claim, as before batching


@pytest.mark.parametrize(
    "bad",
    [{"batch": 0}, {"batch": 2.0}, {"ack_wait": -1.0}, {"ack_wait": 30.0, "visibility": 30.0}],
)
def test_batch_options_are_checked_once(bad: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        WorkerOptions(**bad)


def test_until_empty_goes_on_while_a_handler_may_free_its_group() -> None:
    options = WorkerOptions(worker_id="w", concurrency=3, batch=3, poll_interval=1e-9)
    team = Team(options, until_empty=True)
    team.answer(team.batch(), (), lease(1))  # a deep group: one lease of three asked for
    ticks = itertools.count(team.clock.now, 1e-6)  # a microsecond passes at each look
    team.batches.clock = lambda: next(ticks)
    k = team.drive()[1]
    again = team.batch()  # the poll is over: claim for the two free slots
    assert again.batch == Batch((), options, 2)
    poll = team.answer(again, ())  # nothing, but lease 1's group is busy: not the end
    assert isinstance(poll, SendBatch) and poll.batch == again.batch  # (a poll of 1e-9 s)
    assert isinstance(team.finish(k), Take)  # its ack waits: the batcher's poll is on its way
    fused = team.answer(poll, ())  # its sender sends the ack that came due meanwhile
    assert isinstance(fused, SendBatch)
    # It frees the group's next; the poll that found nothing just ended: no more is asked.
    assert fused.batch == Batch((lease(1),), options, 1)
    team.answer(fused, (True,), lease(2))
    assert team.run.stats().claimed == 2


def test_a_deep_group_goes_lease_after_lease_on_one_slot_without_waking_the_batcher() -> None:
    team = Team()
    team.answer(team.batch(), (), lease(1))  # one group: one lease of the three asked for
    idle = next(team.batcher)
    assert isinstance(idle, WaitBell) and idle.idle  # it polls for the free slots later
    k = team.drive()[1]
    team.rang = 0
    for seq in (2, 3, 4):
        send = sending(team.finish(k))  # the slot sends its ack fused with the next claim
        assert send.batch.limit == 1  # during the idle poll: no more leases than it acks
        step = team.answer(send, (True,), lease(seq), slot=k)  # short again: one lease
        assert isinstance(step, Serve) and step.lease.seq == seq  # the same slot handles it
    assert team.rang == 0  # the batcher is not woken for the slot's batches
    assert team.given == 1  # nor another slot: the sender takes its one lease itself
    assert team.run.stats().succeeded == 3
    sending(team.finish(k))
    wait = next(team.batcher)  # a batch of one on its way: no lease of it can wait in the tray
    assert isinstance(wait, WaitBell) and (wait.seconds or 0) > b.STALL  # so no watch every STALL


def test_the_batcher_in_its_idle_poll_is_not_woken_by_every_short_batch_of_a_slot() -> None:
    options = WorkerOptions(worker_id="w", concurrency=3, batch=3, ack_wait=0.0)
    team = Team(options)
    team.answer(team.batch(), (), lease(1), lease(2))  # two of three: short
    idle = next(team.batcher)
    assert isinstance(idle, WaitBell) and idle.idle and (idle.seconds or 0) <= options.poll_interval
    team.drive()
    team.rang = 0
    send = sending(team.finish(1))
    assert send.batch.limit == 1  # during the poll: no more than it acks
    team.answer(send, (True,), slot=1)  # short again: the poll is pushed back
    assert team.rang == 0  # the batcher wakes before that anyway: not rung
    send = sending(team.finish(2))
    wait = next(team.batcher)  # a slot's batch is on its way: sleep, but not past the poll
    assert isinstance(wait, WaitBell) and 0 < (wait.seconds or 0) <= options.poll_interval


def test_a_slot_reuses_its_handle_step_and_each_lease_starts_as_returned() -> None:
    team = Team()
    team.answer(team.batch(), (), lease(1), lease(2), lease(3))
    first = team.step(1)
    assert isinstance(first, Serve)
    retry = team.finish(1, Raised(ValueError("boom")))  # the first handler fails: a nack
    assert isinstance(retry, Perform) and isinstance(retry.op, Nack)
    retry.result = p.Done(True)
    second = team.step(1)
    assert isinstance(second, Serve) and second.lease.seq == 2
    # The next handler returns: its ack is gathered, not taken for the earlier failure.
    assert isinstance(team.finish(1), Serve)
    stats = team.run.stats()
    assert (stats.failed, stats.succeeded) == (1, 0)
    assert team.batches._acks == [lease(2)]


def test_a_handler_that_settles_its_own_lease_frees_its_slot_for_the_next_claim() -> None:
    team = Team()
    team.answer(team.batch(), (), lease(1))
    k = team.drive()[1]
    team.run.settled_by_handler(lease(1), "acked", 0.0)  # the handler acked it itself
    team.rang = 0
    assert isinstance(team.finish(k), Take)  # nothing for the slot to send
    assert team.rang == 1  # the batcher is told: a slot is free and no ack will claim for it
    team.batches.heard()  # past the idle poll
    claim = team.batch()
    assert claim.batch == Batch((), OPTIONS, 3)  # for all three slots again
    assert team.run.stats().succeeded == 1


def test_once_the_batcher_is_done_a_returned_handler_sends_its_own_ack() -> None:
    options = WorkerOptions(
        worker_id="w", concurrency=3, batch=3, ack_wait=60.0, visibility=120.0, grace=0.0
    )
    team = Team(options)
    team.answer(team.batch(), (), lease(1))
    k = team.drive()[1]
    team.run.request_stop()  # no grace: the batcher ends with the handler still running
    assert next(team.batcher, None) is None
    ack = team.finish(k)
    assert isinstance(ack, Perform) and ack.op == Ack(lease(1), options, fused=False)
    ack.result = p.Done(True)
    assert team.step(k) is None
    assert team.run.stats().succeeded == 1


def test_a_lease_taken_from_the_tray_counts_as_in_its_handler() -> None:
    team = Team()
    team.answer(team.batch(), (), lease(1))
    team.drive()
    team.run.request_stop()
    assert team.run.may_abandon(1)  # the one slot left is inside its handler

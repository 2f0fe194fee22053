"""The batching programs (the batcher and its slots), driven step by step with no database and
no thread: what each batch holds, when it is sent, and what the run counts."""

from __future__ import annotations

from typing import Any

import pytest

from harel_sa import BusyError, Event, InvalidArgumentError, Lease
from harel_sa.worker import WorkerOptions
from harel_sa.worker import programs as p
from harel_sa.worker.batches import BATCHER
from harel_sa.worker.operations import Batch, Nack, Sent
from harel_sa.worker.run import Raised, Run
from harel_sa.worker.steps import Bell, Call, Handle, Program, Send, Step, Wait

OPTIONS = WorkerOptions(worker_id="w", concurrency=3, batch=3, ack_wait=60.0, visibility=120.0)


LEASES = {n: Lease(n, f"g{n}", Event(kind="job"), "w", f"t{n}", 1) for n in range(1, 5)}


def lease(seq: int) -> Lease[Event]:
    return LEASES[seq]


class Team:
    """A batching run's batcher and slots, each stepped by hand."""

    def __init__(self, options: WorkerOptions = OPTIONS, **run: Any) -> None:
        self.run = Run(options, run.get("max_messages"), run.get("until_empty", False))
        [self.batcher, *self.slots] = p.team(self.run)
        self.at: dict[int, Step | None] = {k: next(s) for k, s in enumerate(self.slots, 1)}
        self.rang: list[int] = []
        self.run.on_ring = self.rang.append

    def batch(self) -> Send:
        """The batcher's next step: it must be a batch."""
        step = next(self.batcher)
        assert isinstance(step, Send), step
        return step

    def answer(
        self, send: Send, acked: tuple[bool, ...] = (), *leases: Lease[Event]
    ) -> Step | None:
        """Answer the batch ``send``; the batcher's next step (``None``: it ended)."""
        send.result = Sent(acked, leases)
        return next(self.batcher, None)

    def wake(self, k: int) -> Step | None:
        """Slot ``k`` looks again after its bell: its next step."""
        self.at[k] = next(self.slots[k - 1], None)
        return self.at[k]

    def start(self) -> dict[int, int]:
        """Every slot whose bell rang looks again; ``{seq: slot}`` of those now handling."""
        rang, self.rang[:] = list(self.rang), []
        for k in sorted(set(rang) - {BATCHER}):
            self.wake(k)
        return {s.lease.seq: k for k, s in self.at.items() if isinstance(s, Handle)}

    def finish(self, k: int, outcome: Any = None) -> Step | None:
        """Slot ``k``'s handler ends (returned, unless ``outcome``)."""
        step = self.at[k]
        assert isinstance(step, Handle), step
        if outcome is not None:
            step.outcome = outcome
        return self.wake(k)


def test_one_claim_many_fills_every_free_slot_and_each_gets_one_lease() -> None:
    team = Team()
    assert all(isinstance(s, Bell) and s.bell == k for k, s in team.at.items())  # all free
    claim = team.batch()
    assert claim.batch == Batch((), OPTIONS, 3)  # one claim for the three free slots
    leases = lease(1), lease(2), lease(3)
    assert isinstance(team.answer(claim, (), *leases), Bell)  # the batcher waits for acks
    assert sorted(team.rang) == [1, 2, 3]
    handled = [team.wake(k) for k in (1, 2, 3)]
    assert sorted(s.lease.seq for s in handled if isinstance(s, Handle)) == [1, 2, 3]
    assert team.run.stats().claimed == 3
    assert {h.seq for h in team.run.held()} == {1, 2, 3}  # the heartbeat extends them


def test_acks_are_gathered_into_one_batch_counted_only_once_it_committed() -> None:
    team = Team()
    leases = lease(1), lease(2), lease(3)
    team.answer(team.batch(), (), *leases)
    order = team.start()
    team.finish(order[1])
    wait = next(team.batcher)  # two handlers still hold leases: the first ack waits
    assert isinstance(wait, Bell) and wait.bell == BATCHER and 59 < wait.seconds <= 60
    team.finish(order[2])
    team.finish(order[3])
    assert team.run.stats().succeeded == 0  # not durable yet: nothing counted
    send = team.batch()  # nobody holds a lease any more: no other ack is coming
    assert send.batch == Batch(leases, OPTIONS, 3)  # one commit: three acks, three claims
    team.answer(send, (True, True, True))
    assert team.run.stats().succeeded == 3


def test_with_ack_wait_0_an_ack_is_sent_at_once() -> None:
    options = WorkerOptions(worker_id="w", concurrency=2, batch=2, ack_wait=0.0)
    team = Team(options)
    team.answer(team.batch(), (), lease(1), lease(2))
    team.finish(team.start()[1])
    send = team.batch()  # the other handler still runs: no waiting for it
    assert send.batch == Batch((lease(1),), options, 1)


def test_a_lost_lease_in_a_batch_is_counted_lost_the_others_acked() -> None:
    team = Team()
    team.answer(team.batch(), (), lease(1), lease(2), lease(3))
    for k in team.start().values():
        team.finish(k)
    send = team.batch()
    team.answer(send, (True, False, True))
    stats = team.run.stats()
    assert (stats.succeeded, stats.lost) == (2, 1)


def test_a_stop_releases_the_leases_handed_to_slots_that_had_not_started() -> None:
    team = Team()
    held = lease(1), lease(2), lease(3)
    team.answer(team.batch(), (), *held)
    started = team.wake(1)  # slot 1 starts its handler; slots 2 and 3 have not looked yet
    assert isinstance(started, Handle)
    team.run.request_stop()
    assert team.wake(2) is None and team.wake(3) is None  # they end without handling
    team.finish(1)
    send = team.batch()  # the ack of the one handled, without a claim: stopping
    assert send.batch == Batch((started.lease,), OPTIONS, 0)
    assert team.answer(send, (True,)) is None  # nothing held by a slot any more: it ends
    supervise = p.supervise(team.run)
    step = next(supervise)
    step.alive = 0  # type: ignore[union-attr]
    next(supervise)  # abandon
    released = []
    while (release := next(supervise, None)) is not None:
        assert isinstance(release, Call) and isinstance(release.op, Nack) and release.op.release
        release.result = p.Done(True)
        released.append(release.op.lease)
    assert sorted(r.seq for r in released) == sorted({1, 2, 3} - {started.lease.seq})
    stats = team.run.stats()
    assert (stats.claimed, stats.succeeded, stats.released) == (3, 1, 2)


def test_max_messages_caps_every_claim_and_gives_back_what_a_claim_did_not_find() -> None:
    team = Team(max_messages=4)
    claim = team.batch()
    assert claim.batch.limit == 3
    team.answer(claim, (), lease(1))  # one found: two of the budget come back
    team.finish(team.start()[1])
    send = team.batch()
    assert send.batch == Batch((lease(1),), OPTIONS, 3)  # 3 left of 4, three slots free
    team.answer(send, (True,), lease(2), lease(3), lease(4))
    for k in team.start().values():
        team.finish(k)
    last = team.batch()
    assert last.batch.limit == 0  # the budget is spent: acks alone, no claim
    assert team.answer(last, (True, True, True)) is None
    assert (team.run.stats().claimed, team.run.stats().succeeded) == (4, 4)


def test_a_busy_batch_is_sent_again_and_loses_its_claim_once_stopping() -> None:
    team = Team()
    team.answer(team.batch(), (), lease(1))
    k = team.start()[1]
    team.finish(k)
    send = team.batch()
    send.result = BusyError("database is locked")
    assert next(team.batcher) == Wait(OPTIONS.poll_interval, wake_on_stop=False)
    again = team.batch()
    assert isinstance(again, Send) and again.batch == send.batch  # the same batch, again
    again.result = BusyError("database is locked")
    assert isinstance(next(team.batcher), Wait)
    team.run.request_stop()
    plain = team.batch()
    assert plain.batch == Batch((lease(1),), OPTIONS, 0)
    team.answer(plain, (True,))
    stats = team.run.stats()
    assert (stats.succeeded, stats.lost) == (1, 0)


def test_a_nack_is_sent_by_its_slot_and_frees_it_for_the_next_claim() -> None:
    team = Team()
    team.answer(team.batch(), (), lease(1))
    k = team.start()[1]
    nack = team.finish(k, Raised(ValueError("boom")))
    assert isinstance(nack, Call) and isinstance(nack.op, Nack)
    nack.result = p.Done(True)
    team.rang.clear()
    assert isinstance(team.wake(k), Bell)  # free again, and it tells the batcher
    assert team.rang == [BATCHER]
    idle = next(team.batcher)  # the last claim found fewer than asked: the idle poll first
    assert isinstance(idle, Bell) and idle.idle and idle.seconds <= OPTIONS.poll_interval
    assert team.run.stats().failed == 1


def test_until_empty_ends_once_a_claim_finds_nothing_and_no_handler_runs() -> None:
    team = Team(until_empty=True)
    team.answer(team.batch(), (), lease(1))
    k = team.start()[1]
    team.finish(k)
    send = team.batch()
    assert team.answer(send, (True,)) is None  # the fused claim found nothing, none runs
    assert all(team.wake(k) is None for k in (1, 2, 3))


def test_one_slot_or_batch_1_keeps_the_unbatched_programs() -> None:
    for options in (
        WorkerOptions(concurrency=1, batch=32),
        WorkerOptions(concurrency=4, batch=1),
    ):
        run = Run(options, None, False)
        assert run.batches is None and len(p.team(run)) == options.concurrency
        program: Program = p.team(run)[0]
        assert isinstance(next(program), Call)  # a plain claim, as before batching


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
    k = team.start()[1]
    again = team.batch()  # the poll is over: claim for the two free slots
    assert again.batch == Batch((), options, 2)
    poll = team.answer(again, ())  # nothing, but lease 1's group is busy: not the end
    assert isinstance(poll, Send) and poll.batch == again.batch  # (a poll of 1e-9 s)
    team.finish(k)
    fused = team.answer(poll, ())
    assert isinstance(fused, Send)
    assert fused.batch == Batch((lease(1),), options, 3)  # its ack frees the group's next
    team.answer(fused, (True,), lease(2))
    assert team.run.stats().claimed == 2

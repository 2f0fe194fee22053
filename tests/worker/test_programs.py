"""The programs both drivers perform, driven step by step with no database and no thread: each
branch of the slot and of the supervisor, and what it asks the run state to decide."""

from __future__ import annotations

from typing import Any

import pytest

from harel_sa import BusyError, DeadLetter, Event, Lease, Retry, StorageFullError
from harel_sa.errors import TransportClosedError
from harel_sa.worker import Backoff, WorkerOptions
from harel_sa.worker import programs as p
from harel_sa.worker.operations import Ack, Bury, Claim, Done, Nack
from harel_sa.worker.outcomes import Interrupted, Raised
from harel_sa.worker.runstate import RunState
from harel_sa.worker.steps import Abandon, Handle, Perform, Routine, Step, Wait, WaitSlots

OPTIONS = WorkerOptions(worker_id="w", backoff=Backoff(base=2.0, jitter=0.0), max_deliveries=3)


def lease(seq: int = 1, deliveries: int = 1) -> Lease[Event]:
    return Lease(seq, f"g{seq}", Event(kind="job"), "w", f"t{seq}", deliveries)


def new_run(max_messages: int | None = None, until_empty: bool = False) -> RunState:
    return RunState(OPTIONS, max_messages, until_empty)


def call(step: Step | None) -> Perform:
    assert isinstance(step, Perform), step
    return step


def claimed(program: Routine, taken: Lease[Event] | None) -> Step | None:
    """Answer the claim ``program`` asks for with ``taken``; the next step."""
    step = call(next(program))
    assert isinstance(step.op, Claim)
    step.result = Done(True, taken)
    return next(program, None)


def handled(program: Routine, step: Step | None, outcome: Any = None) -> Perform:
    """Let the handler ``step`` end with ``outcome`` (default: it returned); the next call."""
    assert isinstance(step, Handle), step
    if outcome is not None:
        step.outcome = outcome
    return call(next(program))


def test_a_returned_handler_is_acked_fused_with_the_next_claim() -> None:
    run, first, second = new_run(), lease(1), lease(2)
    program = p.slot(run)
    ack = handled(program, claimed(program, first))
    assert ack.op == Ack(first, OPTIONS, fused=True)
    ack.result = Done(True, second)
    step = next(program)
    assert isinstance(step, Handle) and step.lease == second  # no separate claim
    assert run.stats().claimed == 2 and run.stats().succeeded == 1


def test_a_fused_ack_that_finds_nothing_goes_back_to_claiming() -> None:
    run = new_run(until_empty=True)
    program = p.slot(run)
    ack = handled(program, claimed(program, lease(1)))
    ack.result = Done(True, None)
    assert claimed(program, None) is None  # until_empty: the empty claim ends the slot
    assert run.stats().succeeded == 1


def test_until_empty_an_empty_claim_waits_while_another_slot_holds_a_lease() -> None:
    run = new_run(until_empty=True)
    holder, other = p.slot(run), p.slot(run)
    handling = claimed(holder, lease(1))
    assert claimed(other, None) == Wait(OPTIONS.poll_interval, wake_on_stop=True)
    ack = handled(holder, handling)
    ack.result = Done(True, None)  # the fused claim finds nothing either
    assert claimed(holder, None) is None  # no other slot holds a lease: it ends
    assert claimed(other, None) is None  # and so does this one, looking again
    assert run.stats().succeeded == 1


def test_an_empty_claim_polls_then_claims_again() -> None:
    program = p.slot(new_run())
    step = claimed(program, None)
    assert step == Wait(OPTIONS.poll_interval, wake_on_stop=True)
    assert isinstance(call(next(program)).op, Claim)


def test_max_messages_ends_the_slot_with_a_plain_ack() -> None:
    run, first = new_run(max_messages=1), lease(1)
    program = p.slot(run)
    ack = handled(program, claimed(program, first))
    assert ack.op == Ack(first, OPTIONS, fused=False)  # the budget is spent: no claim
    ack.result = Done(True)
    assert next(program, None) is None


def test_a_busy_claim_gives_back_the_max_messages_reservation() -> None:
    run = new_run(max_messages=1)
    program = p.slot(run)
    busy = call(next(program))
    busy.result = BusyError("database is locked")
    assert next(program) == Wait(OPTIONS.poll_interval, wake_on_stop=True)
    again = call(next(program))  # the one claim of the budget is tried again...
    assert isinstance(again.op, Claim)
    again.result = Done(True, lease(1))
    assert isinstance(next(program), Handle)  # ...and its lease handled


def test_a_worker_stopped_while_retrying_a_busy_ack_and_claim_does_not_claim_again() -> None:
    run, first = new_run(max_messages=5), lease(1)
    program = p.slot(run)
    fused = handled(program, claimed(program, first))
    assert fused.op == Ack(first, OPTIONS, fused=True)
    fused.result = BusyError("database is locked")
    assert next(program) == Wait(OPTIONS.poll_interval, wake_on_stop=False)
    run.request_stop()
    plain = call(next(program))
    assert plain.op == Ack(first, OPTIONS, fused=False)  # the ack lands, without a claim
    plain.result = Done(True)
    assert next(program, None) is None
    stats = run.stats()
    assert (stats.claimed, stats.succeeded, stats.lost) == (1, 1, 0)


def test_a_busy_ack_keeps_trying_while_running() -> None:
    run, first = new_run(), lease(1)
    program = p.slot(run)
    fused = handled(program, claimed(program, first))
    for _ in range(3):
        fused.result = BusyError("database is locked")
        assert isinstance(next(program), Wait)
        fused = call(next(program))
        assert fused.op == Ack(first, OPTIONS, fused=True)
    assert run.stats().lost == 0


def test_a_settle_that_fails_for_another_reason_counts_the_lease_lost() -> None:
    run = new_run(until_empty=True)
    program = p.slot(run)
    ack = handled(program, claimed(program, lease(1)))
    ack.result = StorageFullError("disk full")
    assert isinstance(call(next(program)).op, Claim)  # given up: on to the next message
    assert run.stats().lost == 1


def test_a_fused_ack_given_up_gives_back_its_claim_to_max_messages() -> None:
    run, first = new_run(max_messages=2), lease(1)
    program = p.slot(run)
    ack = handled(program, claimed(program, first))
    assert ack.op == Ack(first, OPTIONS, fused=True)  # the second of two reserved
    ack.result = StorageFullError("disk full")
    step = call(next(program))  # its claim never happened: one is left to claim
    assert isinstance(step.op, Claim)
    assert run.stats().lost == 1


def test_a_failure_is_nacked_with_the_backoff_of_its_delivery() -> None:
    run, taken = new_run(), lease(1, deliveries=2)
    program = p.slot(run)
    nack = handled(program, claimed(program, taken), Raised(ValueError("boom")))
    assert nack.op == Nack(taken, 4.0)  # base 2 * factor 2 ** (2 - 1)
    nack.result = Done(True)
    assert isinstance(call(next(program)).op, Claim)
    assert run.stats().failed == 1


def test_a_failure_at_the_last_delivery_is_dead_lettered_with_the_error() -> None:
    run, taken = new_run(), lease(1, deliveries=3)
    program = p.slot(run)
    bury = handled(program, claimed(program, taken), Raised(ValueError("boom")))
    assert isinstance(bury.op, Bury) and bury.op.lease == taken
    assert bury.op.reason == "handler failed at delivery 3 of 3: ValueError: boom"
    bury.result = Done(True)
    next(program)
    assert (run.stats().failed, run.stats().dead_lettered) == (1, 1)


def test_retry_and_dead_letter_are_what_the_handler_asked_for() -> None:
    run, first, second = new_run(), lease(1), lease(2)
    program = p.slot(run)
    nack = handled(program, claimed(program, first), Raised(Retry(30.0)))
    assert nack.op == Nack(first, 30.0)
    nack.result = Done(True)
    bury = handled(program, claimed(program, second), Raised(DeadLetter("poison")))
    assert bury.op == Bury(second, "poison")
    bury.result = Done(True)
    next(program)
    stats = run.stats()
    assert (stats.retried, stats.dead_lettered, stats.failed) == (1, 1, 0)


def test_a_lease_the_handler_settled_itself_is_left_alone() -> None:
    run, taken = new_run(), lease(1)
    program = p.slot(run)
    step = claimed(program, taken)
    assert isinstance(step, Handle)
    run.settled_by_handler(taken, "dead_lettered", 0.0)  # what the transport reports meanwhile
    assert run.held() == []  # the heartbeat will not extend it, nor call it lost
    assert isinstance(call(next(program)).op, Claim)  # no ack: straight to the next claim
    assert (run.stats().dead_lettered, run.stats().lost) == (1, 0)


def test_another_lease_settled_by_the_handler_is_not_its_own() -> None:
    run, taken = new_run(), lease(1)
    program = p.slot(run)
    step = claimed(program, taken)
    assert isinstance(step, Handle)
    run.settled_by_handler(lease(9), "acked", 0.0)  # a lease the handler claimed itself
    assert call(next(program)).op == Ack(taken, OPTIONS, fused=True)


def test_an_interrupt_releases_the_lease_stops_and_is_kept_for_run_to_raise() -> None:
    run, taken, error = new_run(), lease(1), KeyboardInterrupt()
    program = p.slot(run)
    release = handled(program, claimed(program, taken), Interrupted(error))
    assert release.op == Nack(taken, 0.0, release=True)
    release.result = Done(True)
    assert next(program, None) is None  # stopping: no more claims
    assert run.fatal is error and run.stopping
    assert run.stats().released == 1


def test_a_closed_transport_stops_the_run() -> None:
    run = new_run()
    program = p.slot(run)
    call(next(program)).result = TransportClosedError("closed")
    assert isinstance(next(program), Wait)
    assert run.stopping
    assert next(program, None) is None


def supervisor(run: RunState, alive: int) -> tuple[Routine, WaitSlots]:
    program = p.supervise(run)
    wait = next(program)
    assert isinstance(wait, WaitSlots)
    wait.alive = alive
    return program, wait


def test_the_supervisor_waits_while_running_and_ends_when_the_slots_do() -> None:
    run = new_run()
    program, wait = supervisor(run, alive=2)
    assert next(program) is wait  # still running: look again
    wait.alive = 0
    assert isinstance(next(program), Abandon)
    assert next(program, None) is None and run.done


def test_after_the_grace_the_supervisor_abandons_and_releases_what_is_held() -> None:
    run = RunState(WorkerOptions(grace=0.0), None, False)
    held = lease(1)
    run.claimed(held, 0.0)
    run.handling()  # its slot is inside the handler
    program, _ = supervisor(run, alive=1)
    run.request_stop()  # grace 0: over at once
    assert isinstance(next(program), Abandon)
    release = call(next(program))
    assert release.op == Nack(held, 0.0, release=True)
    release.result = Done(True)
    assert next(program, None) is None
    assert run.stats().released == 1 and run.done


def test_after_the_grace_a_slot_between_two_calls_gets_to_land_its_call() -> None:
    run = RunState(WorkerOptions(grace=0.0), None, False)
    program, wait = supervisor(run, alive=1)  # alive, but not inside a handler
    run.request_stop()
    assert next(program) is wait  # not abandoned yet: it is mid-call
    wait.alive = 0
    assert isinstance(next(program), Abandon)


def test_an_interrupted_supervisor_releases_without_grace_then_ends() -> None:
    run = RunState(WorkerOptions(grace=60.0), None, False)
    held, error = lease(1), KeyboardInterrupt()
    run.claimed(held, 0.0)
    program, _ = supervisor(run, alive=1)
    assert isinstance(program.throw(error), Abandon)
    release = call(next(program))
    assert release.op == Nack(held, 0.0, release=True)
    release.result = Done(True)
    assert next(program, None) is None
    assert run.fatal is error


@pytest.mark.parametrize("max_messages", [0, -1, True, 1.5])
def test_max_messages_must_be_a_positive_whole_number(max_messages: Any) -> None:
    with pytest.raises(ValueError):
        new_run(max_messages=max_messages)


def test_a_heartbeat_that_runs_late_says_so(caplog: pytest.LogCaptureFixture) -> None:
    """The heartbeat thread on its own: an extend that takes longer than a beat (a busy lock,
    a starved process) makes the next beat late, and that is a warning."""
    import threading

    from harel_sa.worker.heartbeat import Heartbeat

    run = RunState(WorkerOptions(visibility=0.3), None, False)  # a beat every 0.1 s
    run.claimed(lease(1), 0.0)
    extended = threading.Event()

    def slow_extend(held: Lease[Event]) -> bool:
        extended.set()
        threading.Event().wait(0.25)  # longer than 1.5 beats
        return True

    beat = Heartbeat(run, slow_extend)
    beat.start()
    try:
        assert extended.wait(20.0)
        for _ in range(400):
            if "heartbeat ran" in caplog.text:
                break
            threading.Event().wait(0.05)
    finally:
        beat.stop()
        beat.join()
    assert "heartbeat ran" in caplog.text and "late (leases last 0.3s)" in caplog.text
    assert run.stats().lost == 0


def test_a_busy_settle_whose_run_ended_meanwhile_counts_the_lease_lost_and_ends() -> None:
    run, first = new_run(), lease(1)
    program = p.slot(run)
    fused = handled(program, claimed(program, first))
    fused.result = BusyError("database is locked")
    assert next(program) == Wait(OPTIONS.poll_interval, wake_on_stop=False)
    run.finish()  # the supervisor ended the run during the pause
    assert next(program, None) is None  # no retry, and no claim
    assert run.stats().lost == 1


def test_a_stop_during_the_idle_poll_ends_the_slot_without_claiming() -> None:
    run = new_run()
    program = p.slot(run)
    assert claimed(program, None) == Wait(OPTIONS.poll_interval, wake_on_stop=True)
    run.request_stop()
    assert next(program, None) is None
    assert run.stats().claimed == 0

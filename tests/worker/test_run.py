"""The run state both worker kinds share, on its own: backoff, options, stop and grace."""

from __future__ import annotations

import pytest

from harel_sa import (
    AsyncWorker,
    Event,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    Lease,
    SqliteTransport,
    Worker,
)
from harel_sa.worker import Backoff, Observer, WorkerOptions
from harel_sa.worker.outcomes import RETURNED
from harel_sa.worker.runstate import RunState
from tests.worker.conftest import Durations


def test_backoff_grows_exponentially_from_the_deliveries_up_to_the_cap() -> None:
    backoff = Backoff(base=1.0, factor=2.0, cap=10.0, jitter=0.0)
    assert [backoff.delay(d) for d in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff.delay(10_000) == 10.0  # no overflow on a message retried for ever


@pytest.mark.parametrize("rand", [0.0, 0.5, 0.999])
def test_jitter_only_shortens_by_at_most_its_fraction(rand: float) -> None:
    backoff = Backoff(base=4.0, factor=2.0, cap=100.0, jitter=0.25)
    assert 3.0 <= backoff.delay(1, rand=lambda: rand) <= 4.0
    assert backoff.delay(1, rand=lambda: rand) == 4.0 * (1 - 0.25 * rand)


@pytest.mark.parametrize(
    "kwargs", [{"base": -1.0}, {"factor": 0.5}, {"jitter": 1.5}, {"cap": -1.0}]
)
def test_backoff_refuses_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidArgumentError):
        Backoff(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [{"visibility": 0}, {"concurrency": 0}, {"poll_interval": 0}, {"grace": -1}, {"worker_id": ""}],
)
def test_worker_options_refuse_nonsense(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidArgumentError):
        WorkerOptions(**kwargs)  # type: ignore[arg-type]


def test_the_heartbeat_gives_a_lease_three_chances() -> None:
    assert WorkerOptions(visibility=30.0).heartbeat_period == 10.0


def test_a_first_stop_starts_the_grace_and_a_second_ends_it() -> None:
    state = RunState(WorkerOptions(grace=60.0), max_messages=None, until_empty=False)
    assert state.grace_left() is None and state.reserve()
    state.request_stop()
    left = state.grace_left()
    assert left is not None and 0 < left <= 60.0
    assert not state.reserve()  # no more claims once stopping
    state.request_stop()
    assert state.grace_left() == 0


def test_max_messages_is_a_budget_of_claims_that_an_empty_claim_gives_back() -> None:
    state = RunState(WorkerOptions(), max_messages=2, until_empty=False)
    assert state.reserve() and state.reserve() and not state.reserve()
    assert state.nothing_claimed() == WorkerOptions().poll_interval  # keep polling...
    assert state.reserve() and not state.reserve()  # ...with the claim given back


def test_until_empty_ends_a_slot_at_the_first_empty_claim() -> None:
    state = RunState(WorkerOptions(), max_messages=None, until_empty=True)
    assert state.reserve()
    assert state.nothing_claimed() is None


def test_a_worker_refuses_a_transport_of_the_other_kind_and_a_bad_handler(db: str) -> None:
    with SqliteTransport(db) as transport:
        with pytest.raises(InvalidArgumentTypeError):
            AsyncWorker(transport, lambda lease: None)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentTypeError):
            Worker(transport, "not callable")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):  # found now, not at every claim
            Worker(transport, lambda lease: None, min_priority=9)
        # A handler that cannot take the lease: found now, not at each message's dead letter.
        with pytest.raises(InvalidArgumentTypeError, match="cannot take the lease"):
            Worker(transport, lambda: None)
        with pytest.raises(InvalidArgumentTypeError, match="missing a required argument"):
            Worker(transport, lambda lease, extra: None)
        Worker(transport, lambda *args: None)  # takes one as well as any


def test_after_the_grace_only_slots_inside_their_handler_are_abandoned_at_once() -> None:
    state = RunState(WorkerOptions(), max_messages=None, until_empty=False)
    state.handling()  # one slot is in its handler; a second is mid ack
    assert state.may_abandon(1)
    assert not state.may_abandon(2)  # the one mid-call gets to land its call first


def test_an_observer_is_told_what_it_overrides_and_only_that() -> None:
    class Counts(Observer):
        def __init__(self) -> None:
            self.seen: list[object] = []

        def count(self, what: str) -> None:
            self.seen.append(what)

    leases = tuple(Lease(n, f"g{n}", Event(kind="x"), "w", f"t{n}") for n in (1, 2))
    for observer, told in ((Counts(), ["claimed", "claimed", "succeeded"]), (Durations(), [0.25])):
        run = RunState(WorkerOptions(worker_id="w", observer=observer), None, False)
        run.landed((), (), "ClaimMany", leases, 0, 0.1)
        run.handling()
        run.plan(leases[0], RETURNED, 0.25)
        run.landed((leases[0],), (True,), "Ack")
        assert observer.seen == told

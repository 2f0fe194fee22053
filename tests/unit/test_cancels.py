"""harel_sa.cancels without a database: what reaches the caller, and which leases are handed
back, when a call or one of its give-backs ends in a cancellation."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from harel_sa import BusyError, Event, Lease
from harel_sa.cancels import Finished, give_back_all, settled


def lease(seq: int) -> Lease[Event]:
    return Lease(seq, f"g{seq}", Event(kind="m"), "w", f"token{seq}")


def test_a_finished_call_hands_its_leases_back_then_raises_the_cancellation_itself() -> None:
    cancelled = asyncio.CancelledError("the caller's")
    given: list[int] = []

    async def call() -> list[Lease[Event]]:
        raise Finished([lease(1), lease(2)], cancelled)

    async def give_back(taken: Lease[Any]) -> bool:
        given.append(taken.seq)
        return True

    with pytest.raises(asyncio.CancelledError) as raised:
        asyncio.run(settled(call(), give_back))
    assert raised.value is cancelled  # the very one: asyncio.timeout knows it by its class
    assert type(raised.value) is asyncio.CancelledError
    assert given == [1, 2]


def test_every_lease_is_handed_back_through_failures_and_cancellations_of_give_backs() -> None:
    """A give-back that fails, one cancelled, one that ran to its end through a cancellation
    (its Finished): the rest are still handed back, then the cancellation is raised."""
    later = asyncio.CancelledError("a second one")
    given: list[int] = []

    async def give_back(taken: Lease[Any]) -> bool:
        given.append(taken.seq)
        if taken.seq == 1:
            raise BusyError("locked")
        if taken.seq == 2:
            raise Finished(True, later)
        if taken.seq == 3:
            raise asyncio.CancelledError("a third")
        return True

    with pytest.raises(asyncio.CancelledError) as raised:
        asyncio.run(give_back_all([lease(n) for n in (1, 2, 3, 4)], give_back))
    assert given == [1, 2, 3, 4]
    assert str(raised.value) == "a third"


def test_a_give_back_that_ran_to_its_end_raises_its_cancellation_not_itself() -> None:
    later = asyncio.CancelledError("a second one")

    async def give_back(taken: Lease[Any]) -> bool:
        raise Finished(True, later)

    with pytest.raises(asyncio.CancelledError) as raised:
        asyncio.run(give_back_all(lease(1), give_back))
    assert raised.value is later


def test_nothing_taken_means_nothing_handed_and_nothing_raised() -> None:
    async def give_back(taken: Lease[Any]) -> bool:
        raise AssertionError("nothing to give back")

    asyncio.run(give_back_all(None, give_back))
    asyncio.run(give_back_all((True, None), give_back))  # an ack_and_claim that found none

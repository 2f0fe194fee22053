"""A claim's checked arguments (``calls.ClaimSpec``): a priority floor is any int, kept within
the floors every dialect has a statement for (0 to ``MAX_PRIORITY``); one above marks the spec
as claiming nothing, so no backend builds or sends a statement for it."""

from __future__ import annotations

import pytest

from harel_sa import Event, InvalidArgumentTypeError
from harel_sa.schema import MAX_PRIORITY
from harel_sa.seam import ClaimSpecs, claim_spec


@pytest.mark.parametrize(
    ("given", "floor", "nothing"),
    [
        (-(10**9), 0, False),
        (-1, 0, False),
        (0, 0, False),
        (3, 3, False),
        (4, 4, False),
        (5, MAX_PRIORITY, True),
        (10**9, MAX_PRIORITY, True),
    ],
)
def test_a_floor_is_clamped_and_one_above_every_priority_claims_nothing(
    given: int, floor: int, nothing: bool
) -> None:
    spec = claim_spec(Event, "w", 30.0, given, None, None)
    assert (spec.min_priority, spec.claims_nothing) == (floor, nothing)


@pytest.mark.parametrize("bad", [1.0, True, "5", None])
def test_a_floor_that_is_not_an_int_is_refused(bad: object) -> None:
    with pytest.raises(InvalidArgumentTypeError):
        claim_spec(Event, "w", 30.0, bad, None, None)


def test_the_remembered_spec_keeps_the_floor_it_was_checked_with() -> None:
    specs = ClaimSpecs(Event)
    high, low = 5, -1
    assert specs("w", 30.0, high, None, None).claims_nothing
    assert specs("w", 30.0, high, None, None) is specs("w", 30.0, high, None, None)
    assert not specs("w", 30.0, low, None, None).claims_nothing

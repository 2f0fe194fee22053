"""Flow control's shared rules: what a pause or a backoff names, checked once for every dialect.

A pause or backoff is a row of ``<prefix>_transport_controls`` (revision 0009) keyed by its
:class:`Target`'s :attr:`~Target.name`: ``group:<id>``, ``key:<routing key>``, or ``key`` (the
messages published without a routing key). The claim of both dialects skips a group whose own
row, or its routing key's, holds a pause or a backoff not yet over; a paused group's
``last_claimed_at`` is :data:`PAUSED_AT`, before every other, and each claim's walk starts
after it, so paused groups cost a claim nothing however many there are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from harel_sa import validate
from harel_sa.errors import InvalidArgumentError, InvalidArgumentTypeError

#: A paused group's place in the rotation: before every group, where no claim's walk goes.
PAUSED_AT: Final = -math.inf
#: The longest backoff: a day (an upstream's Retry-After is seconds or minutes).
MAX_BACKOFF = 86_400.0


class Unset:
    def __repr__(self) -> str:
        return "UNSET"


#: ``pause()``/``resume()``'s "not given": ``routing_key=None`` names the messages published
#: without a routing key.
UNSET: Final = Unset()


@dataclass(frozen=True, slots=True)
class Target:
    """A routing key (``group_id`` ``None``; ``routing_key`` ``None``: the messages published
    without one) or a group (``group_id`` set)."""

    routing_key: str | None = None
    group_id: str | None = None

    @property
    def name(self) -> str:
        """The control row's key: ``group:<id>``, ``key:<routing key>`` or ``key``."""
        if self.group_id is not None:
            return f"group:{self.group_id}"
        return "key" if self.routing_key is None else f"key:{self.routing_key}"


def target(routing_key: object, group_id: object) -> Target:
    """``pause``/``resume``'s target: exactly one of ``routing_key`` and ``group_id`` given
    (:data:`UNSET` is not given), each checked as a publish checks it."""
    if (routing_key is UNSET) == (group_id is UNSET):
        raise InvalidArgumentError(
            "name exactly one of routing_key= (None: the messages without a routing key) "
            "and group_id="
        )
    if group_id is not UNSET:
        return Target(group_id=validate.group_id(group_id))
    return Target(routing_key=validate.routing_key(routing_key))


def key_target(routing_key: object) -> Target:
    """A routing key as a :class:`Target` (``None``: the messages without one), checked."""
    if routing_key is UNSET:
        raise InvalidArgumentTypeError("routing_key must be a str or None")
    return Target(routing_key=validate.routing_key(routing_key))


def backoff_seconds(value: object) -> float:
    """A backoff's length: a finite number of seconds, above 0, at most :data:`MAX_BACKOFF`."""
    seconds = validate.seconds("seconds", value, allow_zero=False)
    if seconds > MAX_BACKOFF:
        raise InvalidArgumentError(f"seconds must be at most {MAX_BACKOFF:.0f}, not {seconds}")
    return seconds


def parse(name: str) -> Target:
    """The :class:`Target` a control row's key names (the inverse of :attr:`Target.name`)."""
    if name.startswith("group:"):
        return Target(group_id=name[6:])
    return Target(routing_key=name[4:] if name.startswith("key:") else None)

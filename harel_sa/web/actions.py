"""The page's writes, each the same transport call as its ``harel-sa`` command.

``requeue`` and ``purge-dead`` (``dead requeue|purge``: one dead letter by seq, a group's or
all), ``release`` (a group's parks, or all), ``purge-group`` (``purge --group``), and ``pause``
and ``resume`` of a group or a routing key (``key``; ``key=`` empty: the messages without one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from harel_sa.present.format import plural
from harel_sa.web.view import pretty

#: The most messages a confirmation counts (the action itself has no limit).
COUNT_LIMIT = 10_000


class ActionError(Exception):
    """A request that names no action, or not what its action needs: nothing is done."""


@dataclass(frozen=True)
class Action:
    """What an action is called (its button), and how it reads the request."""

    name: str
    verb: str
    needs_group: bool
    takes_seq: bool
    perform: Callable[[Any, Request], int]
    done: Callable[[int], str]
    #: Names a group or a routing key (exactly one), and nothing else.
    flow: bool = False


ACTIONS = {
    a.name: a
    for a in (
        Action(
            "requeue",
            "Requeue",
            False,
            True,
            lambda q, r: q.requeue_dead(r.group, r.seqs),
            lambda n: f"requeued {plural(n, 'dead message')}",
        ),
        Action(
            "purge-dead",
            "Purge dead letters",
            False,
            True,
            lambda q, r: q.purge_dead(r.group, r.seqs),
            lambda n: f"purged {plural(n, 'dead message')}",
        ),
        Action(
            "release",
            "Release parked messages",
            False,
            False,
            lambda q, r: q.release(r.group),
            lambda n: f"released {plural(n, 'parked message')}",
        ),
        Action(
            "purge-group",
            "Purge the group",
            True,
            False,
            lambda q, r: q.purge(r.group),
            lambda n: f"purged {plural(n, 'message')}",
        ),
        Action(
            "pause",
            "Pause",
            False,
            False,
            lambda q, r: int(q.pause(**r.target())),
            lambda n: "paused" if n else "was paused already",
            flow=True,
        ),
        Action(
            "resume",
            "Resume",
            False,
            False,
            lambda q, r: int(q.resume(**r.target())),
            lambda n: "resumed" if n else "was not paused",
            flow=True,
        ),
    )
}


@dataclass(frozen=True)
class Request:
    """An action with what it applies to: ``group`` and ``seq`` ``None`` when not given."""

    action: Action
    group: str | None
    seq: int | None
    #: A pause's or resume's routing key: ``""`` for the messages without one.
    key: str | None = None

    def target(self) -> dict[str, str | None]:
        """A pause's or resume's keyword argument."""
        if self.group is not None:
            return {"group_id": self.group}
        return {"routing_key": self.key or None}

    @property
    def seqs(self) -> list[int] | None:
        return None if self.seq is None else [self.seq]

    def what(self) -> str:
        """The request in words, for the confirmation page."""
        if self.action.flow:
            if self.group is not None:
                return "group"
            return f"routing key {self.key}" if self.key else "the messages without a routing key"
        noun = {
            "requeue": "dead letter",
            "purge-dead": "dead letter",
            "release": "parked message",
            "purge-group": "message",
        }[self.action.name]
        which = f"{noun} seq {self.seq}" if self.seq is not None else f"every {noun}"
        return which + ("" if self.group is None else " of group")

    def fields(self) -> list[tuple[str, str]]:
        """The request as form fields (hidden in the confirmation's form, or a link's query)."""
        found = [("action", self.action.name)]
        if self.group is not None:
            found.append(("group", self.group))
        if self.seq is not None:
            found.append(("seq", str(self.seq)))
        if self.key is not None:
            found.append(("key", self.key))
        return found


def parse(params: Mapping[str, str]) -> Request:
    """The request a form or query names; :class:`ActionError` when it is not one."""
    action = ACTIONS.get(params.get("action", ""))
    if action is None:
        raise ActionError(f"no such action: choose one of {', '.join(ACTIONS)}")
    group, key = params.get("group"), params.get("key")
    if action.needs_group and group is None:
        raise ActionError(f"{action.name} needs a group")
    if action.flow and (group is None) == (key is None):
        raise ActionError(f"{action.name} needs a group or a key (key= empty: no routing key)")
    if key is not None and not action.flow:
        raise ActionError(f"{action.name} takes no key")
    seq: int | None = None
    if "seq" in params:
        if not action.takes_seq:
            raise ActionError(f"{action.name} takes no seq")
        try:
            seq = int(params["seq"])
        except ValueError:
            raise ActionError("seq must be a whole number") from None
    return Request(action, group, seq, key)


def affected(q: Any, r: Request) -> list[tuple[str, str]] | None:
    """What ``r`` would change now, as (label, value) rows for the confirmation; ``None`` when
    it names a dead letter (by seq) that is not there."""
    if r.seq is not None:
        letters = q.dead(r.group, [r.seq], 1)
        if not letters:
            return None
        d = letters[0]
        return [("group", d.group_id), ("error", d.error), ("event", pretty(d.event))]
    if r.action.flow:
        held = {(p.group_id, p.routing_key) for p in q.paused()}
        mine = (r.group, None) if r.group is not None else (None, r.key or None)
        return [("paused now", "yes" if mine in held else "no")]
    if r.action.name in ("requeue", "purge-dead"):
        return [("dead letters", str(len(q.dead(r.group, None, COUNT_LIMIT + 1))))]
    messages = q.peek(r.group, COUNT_LIMIT + 1)
    states = [m.state for m in messages]
    if r.action.name == "release":
        return [("parked messages", str(states.count("parked")))]
    return [("messages", str(len(states))), ("of them leased", str(states.count("leased")))]


def missing(q: Any, r: Request) -> bool:
    """Whether ``r`` names a dead letter (by seq) that is not there (then nothing is done)."""
    if r.seq is None:
        return False
    return not q.dead(r.group, [r.seq], 1)

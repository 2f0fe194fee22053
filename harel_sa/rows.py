"""The admin reads' rows as :mod:`harel_sa.models`, one mapper each for every dialect.

Each dialect reads its rows in its own transaction and passes them here with ``text``, how its
stored text becomes ``str`` (SQLite's raw bytes through :func:`shown`; PostgreSQL's as they
are), so the two backends cannot drift apart on what ``stats``, ``peek`` and ``dead`` return.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from harel_sa import flow
from harel_sa.models import (
    DeadMessage,
    Limit,
    MessageState,
    Pause,
    PriorityBucket,
    QueuedMessage,
    RoutingBucket,
    Stats,
)
from harel_sa.rules import PARKED

Text = Callable[[Any], str | None]
Rows = Iterable[tuple[Any, ...]]


def shown(value: bytes | None) -> str | None:
    """Stored text as ``str``: bytes that are not UTF-8 appear as ``\\xNN`` escapes."""
    return None if value is None else value.decode("utf-8", "backslashreplace")


def as_is(value: str | None) -> str | None:
    """Text a driver already decoded."""
    return value


def stats(
    text: Text,
    *,
    now: float,
    counts: tuple[int, int, int],
    groups: int,
    dead: int,
    oldest: object,
    oldest_ready: object,
    by_priority: Rows,
    by_routing_key: Rows,
    published: int,
    by_worker: Rows,
) -> Stats:
    """``counts`` is ``(messages, in flight, parked)``; ``oldest``/``oldest_ready`` when the
    oldest (ready) message arrived, ``None`` if there is none."""
    messages, in_flight, parked = counts
    return Stats(
        now=now,
        messages=messages,
        groups=groups,
        in_flight=in_flight,
        parked=parked,
        dead=dead,
        oldest_age=age(oldest, now),
        by_priority=[PriorityBucket(priority=p, groups=g, messages=m) for p, g, m in by_priority],
        by_routing_key=[
            RoutingBucket(routing_key=text(k), groups=g, messages=m) for k, g, m in by_routing_key
        ],
        ready=messages - in_flight - parked,
        oldest_ready_age=age(oldest_ready, now),
        published=published,
        leases_by_worker={text(worker) or "": n for worker, n in by_worker},
    )


def age(created: object, now: float) -> float | None:
    """Seconds since ``created`` (as :func:`epoch` reads it); ``None`` for no time."""
    when = epoch(created)
    return None if when is None else now - when


def epoch(created: object) -> float | None:
    """``created`` in epoch seconds: a number, or an ISO-8601 time as bytes other programs
    wrote (naive meaning UTC); ``None`` for no time or one that is not a time."""
    if isinstance(created, int | float) and not isinstance(created, bool):
        return float(created)
    if isinstance(created, bytes):
        try:
            when = datetime.fromisoformat(created.decode())
        except ValueError:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return when.timestamp()
    return None


def queued(text: Text, rows: Rows) -> list[QueuedMessage]:
    """Rows of ``(seq, group, event, locked_by, lock_expiry, deliveries, live, enqueued,
    key)``, ``live`` whether the lease is live as a claim reads it (``live_lease``)."""
    return [
        QueuedMessage(
            seq=seq,
            group_id=text(group) or "",
            event=text(event) or "",
            state=_state(text(locked_by), live),
            locked_by=text(locked_by),
            lock_expiry=expiry_of(expiry),
            deliveries=deliveries,
            enqueued_at=epoch(enqueued),
            key=text(key),
        )
        for seq, group, event, locked_by, expiry, deliveries, live, enqueued, key in rows
    ]


def scheduled(text: Text, rows: Rows) -> list[QueuedMessage]:
    """Rows of ``(seq, group, event, due_at, key)`` of the scheduled table."""
    return [
        QueuedMessage(
            seq=seq,
            group_id=text(group) or "",
            event=text(event) or "",
            state="scheduled",
            locked_by=None,
            lock_expiry=None,
            deliveries=0,
            due_at=due,
            key=text(key),
        )
        for seq, group, event, due, key in rows
    ]


def expiry_of(expiry: float | None) -> float | None:
    """An expiry as the models show it: NaN (which only PostgreSQL stores) is no number."""
    return None if expiry is None or (isinstance(expiry, float) and math.isnan(expiry)) else expiry


def _state(locked_by: str | None, live: object) -> MessageState:
    if not live:
        return "ready"
    return "parked" if locked_by == PARKED else "leased"


def dead_messages(text: Text, rows: Rows) -> list[DeadMessage]:
    """Rows of ``(seq, group, event, error, dead_at, deliveries, priority, routing_key)``."""
    return [
        DeadMessage(
            seq=seq,
            group_id=text(group) or "",
            event=text(event) or "",
            error=text(error) or "",
            dead_at=dead_at,
            deliveries=deliveries,
            priority=priority,
            routing_key=text(key),
        )
        for seq, group, event, error, dead_at, deliveries, priority, key in rows
    ]


def pauses(text: Text, found: Rows) -> list[Pause]:
    """The paused control rows, ``(target, paused_at)``, as :class:`~harel_sa.Pause` models."""
    made = []
    for name, since in found:
        target = flow.parse(text(name) or "")
        made.append(Pause(routing_key=target.routing_key, group_id=target.group_id, since=since))
    return made


def limits(text: Text, found: Rows) -> dict[str | None, Limit]:
    """The routing keys' backoffs, ``(target, backoff_until)``, by routing key."""
    limited = {}
    for name, until in found:
        target = flow.parse(text(name) or "")
        if target.group_id is None:
            limited[target.routing_key] = Limit(backoff_until=until)
    return limited

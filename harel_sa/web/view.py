"""What the page shows, read from a transport: totals, rates, groups, leases, dead letters.

Everything comes from the transport's own admin reads (``stats``, ``peek``, ``dead``), as
``harel-sa stats``, ``peek``, ``dead list`` and ``top`` read it; nothing here writes SQL.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from harel_sa.present.format import (
    age,
    cleanup_rows,
    decoded,
    due_rows,
    kind_of,
    target_words,
    utc_time,
)
from harel_sa.present.rates import Rates, Window
from harel_sa.web.chart import Chart, History

#: The oldest messages read to sum up the groups (a larger queue shows the groups of these).
SCAN = 5000
#: The dead letters shown (oldest first).
DEAD_SHOWN = 100
#: The messages a group's page shows (head first).
GROUP_SHOWN = 200


@dataclass
class Message:
    """One message of a group's page, as strings."""

    seq: int
    state: str
    deliveries: int
    until: str
    worker: str
    kind: str
    event: str


@dataclass
class GroupPage:
    """One group's messages, head first (scheduled ones after), and whether it is paused."""

    now: str
    group_id: str
    messages: list[Message]
    cut: bool
    paused: bool
    parked: int


@dataclass
class Group:
    """One group among the messages read: its backlog (ready), in flight and parked counts,
    and the age of its oldest message (``-`` when unknown)."""

    group_id: str
    head: int
    ready: int = 0
    in_flight: int = 0
    parked: int = 0
    oldest: str = "-"


@dataclass
class Dead:
    seq: int
    group_id: str
    deliveries: int
    routing_key: str | None
    dead_at: str
    kind: str
    error: str
    event: str


@dataclass
class Snapshot:
    """One reading of the queue, as the page renders it (strings, never markup)."""

    now: str
    totals: list[tuple[str, str]]
    groups: list[Group]
    groups_cut: bool
    workers: list[tuple[str, int]]
    dead: list[Dead]
    dead_total: int
    rates: list[tuple[str, str]] = field(default_factory=list)
    #: Routing keys: (key, "" for none; groups; messages; paused).
    keys: list[tuple[str, int, int, bool]] = field(default_factory=list)
    #: Pauses and backoffs: (what, until or since, the group or key a resume names).
    held: list[Held] = field(default_factory=list)
    #: The backlog and the rate out over the last minutes (from the second reading on).
    chart: Chart | None = None


@dataclass
class Held:
    """A pause (``resume`` names ``group`` or ``key``) or a backoff (``key`` ``None``)."""

    what: str
    when: str
    group: str | None
    key: str | None


class Reader:
    """Reads snapshots; keeps the recent ones for the rates in and out (as ``top`` does)."""

    def __init__(self, window: float = 60.0) -> None:
        self._window = Window(window)
        self._history = History()
        self._lock = threading.Lock()

    def read(self, q: Any) -> Snapshot:
        stats = q.stats()
        messages = q.peek(None, SCAN + 1)
        dead = q.dead(None, None, DEAD_SHOWN)
        with self._lock:
            when = time.monotonic()
            rates = self._window.add(when, stats)
            self._history.add(when, stats.ready, None if rates is None else rates.settled)
            chart = self._history.chart()
        paused = {(p.group_id, p.routing_key) for p in stats.paused}
        return Snapshot(
            now=utc_time(stats.now),
            totals=[
                ("messages", str(stats.messages)),
                ("ready", str(stats.ready)),
                ("in flight", str(stats.in_flight)),
                ("parked", str(stats.parked)),
                ("dead", str(stats.dead)),
                ("scheduled", str(stats.scheduled)),
                *due_rows(stats),
                ("groups", str(stats.groups)),
                ("oldest age", age(stats.oldest_age)),
                ("oldest ready", age(stats.oldest_ready_age)),
                ("published", str(stats.published)),
                *cleanup_rows(stats.dead_rows, stats.oldest_transaction_age),
            ],
            rates=_rates(rates),
            chart=chart,
            groups=groups(messages[:SCAN], stats.now),
            groups_cut=len(messages) > SCAN,
            workers=sorted(stats.leases_by_worker.items()),
            dead=[
                Dead(
                    d.seq,
                    d.group_id,
                    d.deliveries,
                    d.routing_key,
                    utc_time(d.dead_at),
                    kind_of(d.event),
                    d.error,
                    pretty(d.event),
                )
                for d in dead
            ],
            dead_total=stats.dead,
            keys=[
                (b.routing_key or "", b.groups, b.messages, (None, b.routing_key) in paused)
                for b in stats.by_routing_key
            ],
            held=[
                *(
                    Held(
                        f"paused: {target_words(p.routing_key, p.group_id)}",
                        f"since {utc_time(p.since)}",
                        p.group_id,
                        None if p.group_id is not None else (p.routing_key or ""),
                    )
                    for p in stats.paused
                ),
                *(
                    Held(
                        f"backoff: {target_words(k, None)}",
                        f"until {utc_time(v.backoff_until)}",
                        None,
                        None,
                    )
                    for k, v in stats.limits.items()
                ),
            ],
        )


def _rates(rates: Rates | None) -> list[tuple[str, str]]:
    if rates is None:
        return [("in", "- (after the next refresh)"), ("out", "-")]
    window = f" (last {age(rates.seconds)})"
    return [
        ("in" + window, f"{rates.published:.1f}/s"),
        ("out" + window, f"{rates.settled:.1f}/s"),
    ]


def groups(messages: list[Any], now: float) -> list[Group]:
    """The groups of ``messages`` (oldest first), in the order of their oldest message."""
    found: dict[str, Group] = {}
    for m in messages:
        g = found.get(m.group_id)
        if g is None:
            oldest = "-" if m.enqueued_at is None else age(max(0.0, now - m.enqueued_at))
            g = found[m.group_id] = Group(m.group_id, m.seq, oldest=oldest)
        if m.state == "leased":
            g.in_flight += 1
        elif m.state == "parked":
            g.parked += 1
        else:
            g.ready += 1
    return list(found.values())


def pretty(event: str) -> str:
    """A stored event indented for reading (as stored when it is not JSON)."""
    value = decoded(event)
    return event if value is None else json.dumps(value, indent=2, ensure_ascii=False)


def group_page(q: Any, group_id: str) -> GroupPage:
    """``group_id``'s page: its messages as ``harel-sa peek --group`` reads them."""
    found = q.peek(group_id, GROUP_SHOWN + 1, scheduled=True)
    stats_now = q.stats().now
    messages = [
        Message(
            m.seq,
            m.state,
            m.deliveries,
            _until(m, stats_now),
            (m.locked_by or "-").split("#", 1)[0] if m.state == "leased" else "-",
            kind_of(m.event),
            pretty(m.event),
        )
        for m in found[:GROUP_SHOWN]
    ]
    paused = any(p.group_id == group_id for p in q.paused())
    return GroupPage(
        utc_time(stats_now),
        group_id,
        messages,
        len(found) > GROUP_SHOWN,
        paused,
        sum(m.state == "parked" for m in messages),
    )


def _until(m: Any, now: float) -> str:
    """When a lease, park or schedule ends, from now; ``-`` for a ready message."""
    at = m.due_at if m.state == "scheduled" else m.lock_expiry
    if m.state == "ready" or at is None:
        return "-"
    return f"in {age(max(at - now, 0.0))}"

"""One file, two transports: what harel's own transport wrote, harel_sa drains, and the
reverse; and both at once from separate processes."""

from __future__ import annotations

import sqlite3
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harel.engine.transport import SqliteTransport as HarelTransport
from harel.spec.states import Event as HarelEvent

from harel_sa import Event, SqliteTransport
from tests import forkserver
from tests.checks import assert_nothing_stranded
from tests.conftest import FakeClock
from tests.harel import bodies

MOMENT = datetime(2026, 12, 1, 9, 30, 0, 123456, tzinfo=UTC)


def backlog(publish: Any, event_type: Any) -> dict[str, list[str]]:
    """Three events in each of groups a-d (created_time null and set); the JSON of each."""
    sent: dict[str, list[str]] = {}
    for group in "abcd":
        for i in range(3):
            event = event_type(kind=f"{group}{i}", created_time=MOMENT if i % 2 else None)
            publish(group, event)
            sent.setdefault(group, []).append(event.model_dump_json())
    return sent


def drain(claim: Any, ack: Any) -> dict[str, list[str]]:
    got: dict[str, list[str]] = {}
    while (lease := claim()) is not None:
        got.setdefault(lease.group_id, []).append(lease.event.model_dump_json())
        ack(lease)
    return got


def test_a_file_harels_transport_wrote_is_drained_by_harel_sa(tmp_path: Path) -> None:
    path, clock = tmp_path / "queue.db", FakeClock()
    theirs = HarelTransport(path, clock)
    sent = backlog(theirs.publish, HarelEvent)
    leased = theirs.claim("harel-worker", 30)  # a's head, leased for 30 s
    parked = theirs.claim("harel-worker", 30)
    theirs.nack(parked, delay=60)  # b's head, parked for 60 s
    assert (leased.group_id, parked.group_id) == ("a", "b")
    theirs.close()

    with SqliteTransport(path, clock) as ours:  # upgrades harel's schema-3 tables at open
        claim = lambda: ours.claim("sa-worker", 30)  # noqa: E731
        first = drain(claim, ours.ack)
        assert first == {"c": sent["c"], "d": sent["d"]}  # a is leased, b is parked
        clock.advance(31)
        assert drain(claim, ours.ack) == {"a": sent["a"]}  # the lease lapsed
        clock.advance(30)
        assert drain(claim, ours.ack) == {"b": sent["b"]}  # the park ended
        assert ours.dead() == [] and ours.stats().messages == 0


def test_a_file_harel_sa_wrote_is_drained_by_harels_transport(tmp_path: Path) -> None:
    path, clock = tmp_path / "queue.db", FakeClock()
    with SqliteTransport(path, clock) as ours:
        sent = backlog(ours.publish, Event)
        leased = ours.claim("sa-worker", 30)
        parked = ours.claim("sa-worker", 30)
        assert leased is not None and parked is not None
        assert ours.nack(parked, delay=60)
        assert (leased.group_id, parked.group_id) == ("a", "b")

    theirs = HarelTransport(path, clock)
    try:
        claim = lambda: theirs.claim("harel-worker", 30)  # noqa: E731
        assert drain(claim, theirs.ack) == {"c": sent["c"], "d": sent["d"]}
        clock.advance(31)
        assert drain(claim, theirs.ack) == {"a": sent["a"]}
        clock.advance(30)
        assert drain(claim, theirs.ack) == {"b": sent["b"]}
    finally:
        theirs.close()
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT count(*) FROM harel_transport_messages").fetchone()[0] == 0
        assert_nothing_stranded(raw)


def test_both_transports_share_one_file_from_separate_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "queue.db")
    HarelTransport(path).close()  # the file starts as harel made it; harel_sa upgrades it live
    ctx = forkserver.context()
    out = ctx.Queue()  # type: ignore[attr-defined]
    producers_done = ctx.Event()  # type: ignore[attr-defined]
    start = ctx.Barrier(4)  # type: ignore[attr-defined]  # every process has its transport open
    producers = [
        ctx.Process(  # type: ignore[attr-defined]
            target=bodies.produce,
            args=(bodies.Job(kind, path, f"{kind}-producer", 12, 150), out, start),
        )
        for kind in ("harel", "harel_sa")
    ]
    consumers = [
        ctx.Process(  # type: ignore[attr-defined]
            target=bodies.consume,
            args=(bodies.Job(kind, path, f"{kind}-consumer"), producers_done, out, start),
        )
        for kind in ("harel", "harel_sa")
    ]
    for process in consumers + producers:
        process.start()
    reports = {}
    for _ in producers:
        name, published = out.get(timeout=120)
        reports[name] = published
    producers_done.set()
    for _ in consumers:
        name, delivered, doubled = out.get(timeout=120)
        reports[name] = (delivered, doubled)
    for process in consumers + producers:
        process.join(timeout=60)
        assert process.exitcode == 0

    published = reports["harel-producer"] + reports["harel_sa-producer"]
    deliveries = reports["harel-consumer"][0] + reports["harel_sa-consumer"][0]
    assert reports["harel-consumer"][1] == [] and reports["harel_sa-consumer"][1] == []
    assert all(reports[f"{kind}-consumer"][0] for kind in ("harel", "harel_sa")), "both consumed"
    assert Counter(event_id for _, _, event_id, _ in deliveries) == Counter(
        event_id for _, event_id in published
    ), "every message delivered exactly once"
    for group in {group for group, _ in published}:
        in_group = sorted((at, seq) for g, seq, _, at in deliveries if g == group)
        seqs = [seq for _, seq in in_group]
        assert seqs == sorted(seqs), f"group {group} delivered out of order"
    with sqlite3.connect(path) as raw:
        assert_nothing_stranded(raw)

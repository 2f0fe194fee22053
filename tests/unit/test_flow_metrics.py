"""The queue collector shows what is held back: a gauge per pause, one per key's backoff end."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from harel_sa import SqliteTransport
from harel_sa.metrics import QueueCollector


def test_pauses_and_backoffs_are_gauges(tmp_path: Path) -> None:
    now = [1_000.0]
    with SqliteTransport(tmp_path / "q.db", clock=lambda: now[0]) as q:
        registry = CollectorRegistry()
        registry.register(QueueCollector(q))
        assert (
            registry.get_sample_value("harel_sa_queue_paused", {"kind": "group", "name": "g"})
            is None
        )
        q.pause(group_id="g")
        q.pause(routing_key=None)
        q.backoff("mail", 30)
        sample = registry.get_sample_value
        assert sample("harel_sa_queue_paused", {"kind": "group", "name": "g"}) == 1
        assert sample("harel_sa_queue_paused", {"kind": "routing_key", "name": ""}) == 1
        assert sample("harel_sa_queue_backoff_until_seconds", {"routing_key": "mail"}) == 1_030
        q.resume(group_id="g")
        now[0] += 31
        assert sample("harel_sa_queue_paused", {"kind": "group", "name": "g"}) is None
        assert sample("harel_sa_queue_backoff_until_seconds", {"routing_key": "mail"}) is None

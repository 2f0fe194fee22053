"""What ``stats()`` shows of what holds back VACUUM on PostgreSQL (nothing on SQLite): the
dead rows of the prefix's tables and the oldest transaction open on the database, so that an
operator sees an idle-in-transaction session before the queue's tables bloat."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg

from harel_sa import Event, PostgresTransport, SqliteTransport
from harel_sa.cli.top import plain_line


def test_stats_show_the_dead_rows_and_the_transaction_that_keeps_them(pg_url: str) -> None:
    with PostgresTransport(pg_url) as q, psycopg.connect(pg_url) as other:
        assert q.stats().oldest_transaction_age is None
        other.execute("SELECT txid_current()")  # open, idle, holding an xid
        opened = time.monotonic()
        q.publish_many([(f"g{i}", Event(kind="m")) for i in range(20)])
        for lease in q.claim_many("w", 30.0, 20):
            assert q.ack(lease)
        # The server's statistics arrive when a backend goes idle, within seconds.
        deadline = time.monotonic() + 30
        while (stats := q.stats()).dead_rows == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        # 20 messages and 20 groups deleted, each updated by its claim: 80 dead rows at least.
        assert stats.dead_rows is not None and stats.dead_rows >= 80, stats
        age = stats.oldest_transaction_age
        assert age is not None and 0 < age <= time.monotonic() - opened + 1, stats
        assert "oldest_transaction=" in plain_line(stats, None)
        other.rollback()
        assert q.stats().oldest_transaction_age is None


def test_sqlite_has_no_such_figures(tmp_path: Path) -> None:
    with SqliteTransport(tmp_path / "q.db") as q:
        stats = q.stats()
    assert (stats.dead_rows, stats.oldest_transaction_age) == (None, None)
    assert "dead_rows" not in plain_line(stats, None)

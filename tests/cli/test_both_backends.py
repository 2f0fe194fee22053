"""Every queue command on both backends: ``stats``, ``peek``, ``release``, ``purge``, ``dead
list|requeue|purge`` and ``top`` on a SQLite file (``--db``) and on a PostgreSQL database
(``--url postgresql://...``), the same queue made the same way on each: the same JSON (times
aside), the same exit codes. The commands that only read work for a role that may only
``SELECT`` the queue's tables; a URL of neither dialect is named as such."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from harel_sa import Event, PostgresTransport, SqliteTransport
from tests.cli.conftest import Cli, as_json, one_line_error

BACKENDS = ["sqlite", "postgresql"]


def where(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> list[str]:
    if backend == "sqlite":
        return ["--db", str(tmp_path / "q.db")]
    return ["--url", str(request.getfixturevalue("pg_url"))]


def a_queue(q: Any) -> None:
    """Three groups: one leased, one parked, one ready; and one dead letter."""
    q.publish("leased", Event(kind="a"), priority=2, routing_key="k")
    q.publish("parked", Event(kind="b"))
    q.publish("ready", Event(kind="c", data={"n": 1}))
    q.publish("dead", Event(kind="d"))
    for _ in range(4):
        lease = q.claim("billing-1", 300.0)
        assert lease is not None
        if lease.group_id == "parked":
            assert q.nack(lease, 600.0)
        elif lease.group_id == "dead":
            assert q.dead_letter(lease, "no refunds")
        elif lease.group_id == "ready":
            assert q.nack(lease, 0.0)


def opened(backend: str, at: list[str]) -> Any:
    return SqliteTransport(at[1]) if backend == "sqlite" else PostgresTransport(at[1])


#: What differs from queue to queue: times, ages, event ids and lease tokens.
VARYING = {
    "now",
    "oldest_age",
    "oldest_ready_age",
    "lock_expiry",
    "dead_at",
    "created_time",
    "enqueued_at",
}
VARYING |= {"id", "locked_by"}
#: What only PostgreSQL has (what holds back its VACUUM; None on SQLite).
VARYING |= {"dead_rows", "oldest_transaction_age"}


def timeless(value: Any) -> Any:
    """``value`` with every time, age, id and token left out."""
    if isinstance(value, dict):
        return {k: timeless(v) for k, v in value.items() if k not in VARYING}
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value


@pytest.fixture
def queues(cli: Cli, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, list[str]]:
    found = {}
    for backend in BACKENDS:
        at = where(backend, tmp_path, request)
        with opened(backend, at) as q:
            a_queue(q)
        found[backend] = at
    return found


def test_every_queue_command_answers_the_same_on_both_backends(
    cli: Cli, queues: dict[str, list[str]]
) -> None:
    reads = [["stats"], ["peek"], ["peek", "--group", "parked"], ["dead", "list"]]
    answers: dict[str, list[Any]] = {}
    for backend, at in queues.items():
        answers[backend] = []
        for command in reads:
            done = cli(*command, *at, "--json")
            assert done.returncode == 0, (backend, command, done.stderr)
            answers[backend].append(timeless(as_json(done)))
        top = cli("top", *at, "--iterations", "1", "--plain")
        assert top.returncode == 0 and "dead=1" in top.stdout, (backend, top.stderr)
    assert answers["sqlite"] == answers["postgresql"]
    stats = answers["sqlite"][0]
    assert (stats["messages"], stats["in_flight"], stats["parked"], stats["dead"]) == (3, 1, 1, 1)

    for backend, at in queues.items():
        released = cli("release", *at, "--json")
        assert as_json(released) == {"released": 1}, backend
        missing = cli("dead", "requeue", *at, "--seq", "999")
        assert missing.returncode == 1 and "no dead message with seq 999" in missing.stderr
        requeued = cli("dead", "requeue", *at, "--json")
        assert as_json(requeued) == {"requeued": 1}, backend
        declined = cli("purge", *at, "--group", "ready")
        assert declined.returncode == 1, backend  # asked, no answer: nothing deleted
        assert as_json(cli("purge", *at, "--group", "ready", "--yes", "--json")) == {"purged": 1}
        assert as_json(cli("dead", "purge", *at, "--yes", "--json")) == {"purged": 0}
        with opened(backend, at) as q:
            left = q.stats()
            assert (left.messages, left.parked, left.dead) == (3, 0, 0), backend


def test_purge_takes_the_groups_scheduled_messages_too(
    cli: Cli, queues: dict[str, list[str]]
) -> None:
    for backend, at in queues.items():
        with opened(backend, at) as q:
            q.publish("later", Event(kind="x"), delay=3600)  # a group of scheduled ones only
            q.publish("ready", Event(kind="y"), key="K", delay=3600)
            q.publish("kept", Event(kind="z"), delay=3600)
        declined = cli("purge", *at, "--group", "later")
        assert declined.returncode == 1 and "1 message(s)" in declined.stderr, backend
        assert as_json(cli("purge", *at, "--group", "later", "--yes", "--json")) == {"purged": 1}
        assert as_json(cli("purge", *at, "--group", "ready", "--yes", "--json")) == {"purged": 2}
        with opened(backend, at) as q:
            left = q.stats()
            assert (left.messages, left.scheduled) == (2, 1), backend
            assert [m.group_id for m in q.peek(scheduled=True) if m.state == "scheduled"] == [
                "kept"
            ]


def test_peek_shows_the_keys_as_a_column_and_in_json(
    cli: Cli, queues: dict[str, list[str]]
) -> None:
    for backend, at in queues.items():
        plain = cli("peek", *at)
        assert plain.stdout.split("\n")[0].split()[:3] == ["seq", "group", "state"], backend
        with opened(backend, at) as q:
            q.publish("ready", Event(kind="y"), key="reindex:7")
            q.publish("later", Event(kind="x"), key="timer:9", delay=3600)
        text = cli("peek", *at)
        assert text.stdout.split("\n")[0].split()[:4] == ["seq", "group", "key", "state"]
        keys = [line.split()[2] for line in text.stdout.strip().split("\n")[1:]]
        assert keys == ["-", "-", "-", "reindex:7", "timer:9"], backend
        shown = as_json(cli("peek", *at, "--json"))
        assert [(m["group_id"], m["key"]) for m in shown] == [
            ("leased", None),
            ("parked", None),
            ("ready", None),
            ("ready", "reindex:7"),
            ("later", "timer:9"),
        ], backend


def test_the_reading_commands_work_for_a_role_that_may_only_select(cli: Cli, pg_url: str) -> None:
    import psycopg
    from sqlalchemy import make_url

    with PostgresTransport(pg_url) as q:
        a_queue(q)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS harel_sa_reader")
        conn.execute("CREATE ROLE harel_sa_reader LOGIN")
        conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA public TO harel_sa_reader")
    reader = make_url(pg_url).set(username="harel_sa_reader").render_as_string()
    try:
        for command in (["stats"], ["peek"], ["dead", "list"]):
            done = cli(*command, "--url", reader, "--json")
            assert done.returncode == 0, (command, done.stderr)
        top = cli("top", "--url", reader, "--iterations", "1", "--plain")
        assert top.returncode == 0, top.stderr
        refused = cli("release", "--url", reader)  # a write: the server says no
        assert refused.returncode == 1, refused.stderr
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP OWNED BY harel_sa_reader")
            conn.execute("DROP ROLE harel_sa_reader")


def test_the_reading_commands_write_nothing_on_postgresql_even_as_the_owner(
    cli: Cli, pg_url: str
) -> None:
    """Their transactions are read-only: the server itself refuses a write there."""
    import psycopg

    from harel_sa.postgres.connect import conninfo, read_only

    with (
        psycopg.connect(conninfo(read_only(pg_url))) as conn,
        pytest.raises(psycopg.errors.ReadOnlySqlTransaction),
    ):
        conn.execute("CREATE TABLE nothing (n int)")


@pytest.mark.parametrize("url", ["postgressql://app@db/shop", "mysql://app@db/shop"])
def test_a_url_of_neither_dialect_is_named_as_such(cli: Cli, url: str) -> None:
    done = cli("stats", "--url", url)
    assert done.returncode == 2
    line = one_line_error(done)
    assert "unknown database URL scheme" in line and "postgresql://" in line, line


def test_a_sqlite_file_made_by_sqlite3_is_no_queue(cli: Cli, tmp_path: Path) -> None:
    sqlite3.connect(tmp_path / "empty.db").close()
    done = cli("stats", "--db", str(tmp_path / "empty.db"))
    assert done.returncode == 3, done.stderr


def test_the_reading_commands_work_through_a_transaction_pooler(
    cli: Cli, pg_url: str, transaction_pooler: Any
) -> None:
    """PgBouncer refuses libpq's ``options``: there the reading commands open as the others
    do (the role's own settings apply), rather than not at all."""
    with PostgresTransport(pg_url) as q:
        a_queue(q)
    through = transaction_pooler.url(pg_url)
    for command in (["stats"], ["peek"], ["dead", "list"]):
        done = cli(*command, "--url", through, "--json")
        assert done.returncode == 0, (command, done.stderr)
    assert as_json(cli("stats", "--url", through, "--json"))["messages"] == 3

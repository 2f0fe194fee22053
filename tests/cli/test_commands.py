"""``harel-sa`` on prepared files: what it prints is what the file holds, it asks before
deleting, migrates, and turns every bad input into one line and a meaningful exit code."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harel_sa import Event, SqliteTransport, migrations
from harel_sa.cli import main
from tests.cli.conftest import Cli, as_json, one_line_error, rows

M, G = "harel_transport_messages", "harel_transport_groups"


@pytest.fixture
def queue(db: str) -> str:
    """A file with: a leased head (orders-1), a parked message (orders-2, priority 3, key
    gpu), a ready one behind the lease, and a ready group under key gpu."""
    with SqliteTransport(db, lambda: time.time() - 50) as early:  # enqueued 50 s ago
        early.publish("orders-1", Event(kind="created"))
    with SqliteTransport(db) as q:  # the real clock: the CLI reads it too
        q.publish("orders-1", Event(kind="paid"))
        q.publish("orders-2", Event(kind="created"), priority=3, routing_key="gpu")
        q.publish("mail-7", Event(kind="send"), routing_key="gpu")
        q.claim("w1", 3600.0)
        q.nack(q.claim("w2", 3600.0), 3600.0)
    return db


def test_every_command_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    commands = [
        [],
        ["demo"],
        ["db"],
        *(["db", c] for c in ("upgrade", "current", "check", "sql")),
        ["stats"],
        ["peek"],
        ["release"],
        ["purge"],
        ["dead"],
        *(["dead", c] for c in ("list", "requeue", "purge")),
        ["worker"],
        ["top"],
    ]
    for command in commands:
        with pytest.raises(SystemExit) as exit:
            main([*command, "--help"])
        assert exit.value.code == 0
        assert capsys.readouterr().out.startswith("usage: harel-sa")


def test_the_console_script_is_installed() -> None:
    script = Path(sys.executable).with_name("harel-sa")
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "db" in done.stdout and "demo" in done.stdout


def test_stats_prints_the_figures_of_the_file(cli: Cli, queue: str) -> None:
    stats = as_json(cli("stats", "--db", queue, "--json"))
    [(messages,)] = rows(queue, f"SELECT count(*) FROM {M}")
    [(groups,)] = rows(queue, f"SELECT count(*) FROM {G}")
    assert (stats["messages"], stats["groups"]) == (messages, groups) == (4, 3)
    assert (stats["in_flight"], stats["parked"], stats["dead"]) == (1, 1, 0)
    assert stats["oldest_age"] >= 50
    assert [(b["priority"], b["groups"], b["messages"]) for b in stats["by_priority"]] == [
        (0, 2, 3),
        (3, 1, 1),
    ]
    assert [(b["routing_key"], b["messages"]) for b in stats["by_routing_key"]] == [
        (None, 2),
        ("gpu", 2),
    ]
    text = cli("stats", "--db", queue)
    assert text.returncode == 0
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["messages", "4"] and lines[2].split() == ["in", "flight", "1"]
    assert "by routing key" in text.stdout and "gpu" in text.stdout


def test_peek_shows_the_next_messages_without_claiming_them(cli: Cli, queue: str) -> None:
    before = rows(queue, f"SELECT seq, locked_by, lock_expiry, deliveries FROM {M} ORDER BY seq")
    peeked = as_json(cli("peek", "--db", queue, "--json"))
    assert [(m["seq"], m["group_id"], m["state"]) for m in peeked] == [
        (1, "orders-1", "leased"),
        (2, "orders-1", "ready"),
        (3, "orders-2", "parked"),
        (4, "mail-7", "ready"),
    ]
    events = {seq: event for seq, event in rows(queue, f"SELECT seq, event FROM {M}")}
    assert all(m["event"] == json.loads(events[m["seq"]]) for m in peeked)  # an object
    one = as_json(cli("peek", "--db", queue, "--group", "orders-1", "--limit", "1", "--json"))
    assert [m["seq"] for m in one] == [1]
    text = cli("peek", "--db", queue, "--group", "orders-2")
    assert text.returncode == 0 and "parked" in text.stdout and "orders-2" in text.stdout
    after = rows(queue, f"SELECT seq, locked_by, lock_expiry, deliveries FROM {M} ORDER BY seq")
    assert after == before  # nothing claimed


def test_release_ends_the_park_now(cli: Cli, queue: str) -> None:
    assert as_json(cli("release", "--db", queue, "--json")) == {"released": 1}
    [(locked_by,)] = rows(queue, f"SELECT locked_by FROM {M} WHERE group_id = 'orders-2'")
    assert locked_by is None


@pytest.mark.parametrize("answer", ["", "n\n", "no\n", "maybe\n"])
def test_purge_without_yes_and_no_agreement_deletes_nothing(
    cli: Cli, queue: str, answer: str
) -> None:
    before = rows(queue, f"SELECT * FROM {M} ORDER BY seq")
    done = cli("purge", "--db", queue, "--group", "orders-1", input=answer)
    assert done.returncode == 1
    assert "nothing deleted" in done.stderr
    assert rows(queue, f"SELECT * FROM {M} ORDER BY seq") == before


@pytest.mark.parametrize(("args", "answer"), [(["--yes"], ""), ([], "y\n"), ([], "YES\n")])
def test_purge_deletes_the_group_when_agreed(
    cli: Cli, queue: str, args: list[str], answer: str
) -> None:
    done = cli("purge", "--db", queue, "--group", "orders-1", "--json", *args, input=answer)
    assert done.returncode == 0, done.stderr
    assert as_json(done) == {"purged": 2}
    assert rows(queue, f"SELECT DISTINCT group_id FROM {M} ORDER BY group_id") == [
        ("mail-7",),
        ("orders-2",),
    ]


def test_db_upgrade_then_check_succeed_on_a_new_file(cli: Cli, tmp_path: Path) -> None:
    db = str(tmp_path / "new.db")
    upgraded = as_json(cli("db", "upgrade", "--db", db, "--json"))
    assert upgraded["before"] == [] and upgraded["at_head"] is True
    assert upgraded["current"] == list(migrations.heads())
    assert cli("db", "check", "--db", db).returncode == 0
    assert as_json(cli("db", "current", "--url", f"sqlite:///{db}", "--json"))["at_head"]


def test_db_upgrade_then_check_succeed_on_an_empty_file(cli: Cli, tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.touch()
    assert cli("db", "check", "--db", str(db)).returncode == 1
    assert cli("db", "upgrade", "--db", str(db)).returncode == 0
    assert cli("db", "check", "--db", str(db)).returncode == 0


def test_a_file_behind_head_fails_check_and_every_queue_command(cli: Cli, db: str) -> None:
    migrations.upgrade(db, revision="harel_sa_0002")
    check = cli("db", "check", "--db", db)
    assert check.returncode == 1 and "harel_sa_0002" in check.stdout
    stats = cli("stats", "--db", db)
    assert stats.returncode == 3
    assert "harel-sa db upgrade" in one_line_error(stats)
    assert cli("db", "upgrade", "--db", db).returncode == 0
    assert cli("stats", "--db", db).returncode == 0


def test_a_prefix_moves_on_its_own(cli: Cli, db: str) -> None:
    assert cli("db", "upgrade", "--db", db, "--prefix", "jobs").returncode == 0
    assert cli("db", "check", "--db", db, "--prefix", "jobs").returncode == 0
    assert cli("db", "check", "--db", db).returncode == 1  # "harel" was never migrated
    assert "CREATE TABLE IF NOT EXISTS jobs_transport_messages" in (
        cli("db", "sql", "--prefix", "jobs").stdout
    )


@pytest.mark.parametrize(
    "args",
    [
        ["stats", "--db", "."],
        ["stats", "--db", "/nonexistent/dir/x.db"],
        ["db", "upgrade", "--db", "/nonexistent/dir/x.db"],
        ["db", "check", "--db", "missing.db"],
        ["peek", "--url", "postgressql://x"],
        ["stats", "--url", "sqlite+foo:///x.db"],
        ["db", "upgrade", "--url", "sqlite+foo:///x.db"],
        ["stats", "--url", "sqlite://"],
        ["stats"],
        ["stats", "--db", "x.db", "--prefix", "no-dashes"],
        ["stats", "--db", "not-a-db.txt"],
        ["db", "check", "--db", "not-a-db.txt"],
        ["peek", "--db", "x.db", "--limit", "zero"],
        ["frobnicate"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli: Cli, tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "not-a-db.txt").write_text("hello, I am not a database\n" * 100)
    done = cli(*args)
    one_line_error(done)
    assert done.returncode == 2
    assert not (tmp_path / "missing.db").exists()  # reading commands never create files


@pytest.fixture
def dead_db(db: str) -> str:
    """A file with one dead message: an event written raw that does not parse, then claimed."""
    with SqliteTransport(db) as q:
        q.publish("ok", Event(kind="fine"))
    with sqlite3.connect(db) as conn:
        conn.execute(f"INSERT INTO {M} (group_id, event) VALUES ('broken', '{{not json')")
        conn.execute(f"INSERT INTO {G} (group_id) VALUES ('broken')")
    with SqliteTransport(db) as q:
        lease = q.claim("w", 30.0)
        assert lease is not None and lease.group_id == "ok"  # "broken" went to the dead table
        assert q.claim("w", 30.0) is None
    return db


def test_dead_list_requeue_and_purge(cli: Cli, dead_db: str) -> None:
    D = "harel_transport_dead"
    [listed] = as_json(cli("dead", "list", "--db", dead_db, "--json"))
    assert (listed["group_id"], listed["event"]) == ("broken", None)  # not JSON: no object...
    assert listed["event_text"] == "{not json"  # ...but the text as stored
    assert "undecodable" in listed["error"]
    text = cli("dead", "list", "--db", dead_db, "--group", "broken")
    assert text.returncode == 0 and "broken" in text.stdout and "undecodable" in text.stdout
    assert as_json(cli("dead", "list", "--db", dead_db, "--group", "ok", "--json")) == []

    requeued = cli("dead", "requeue", "--db", dead_db, "--seq", str(listed["seq"]), "--json")
    assert as_json(requeued) == {"requeued": 1}
    assert rows(dead_db, f"SELECT count(*) FROM {D}") == [(0,)]
    assert rows(dead_db, f"SELECT event FROM {M} WHERE group_id = 'broken'") == [("{not json",)]

    with SqliteTransport(dead_db) as q:  # it fails again, and goes back to the dead table
        assert q.claim("w", 30.0) is None
    declined = cli("dead", "purge", "--db", dead_db)
    assert declined.returncode == 1 and rows(dead_db, f"SELECT count(*) FROM {D}") == [(1,)]
    purged = cli("dead", "purge", "--db", dead_db, "--group", "broken", "--yes", "--json")
    assert as_json(purged) == {"purged": 1}
    assert rows(dead_db, f"SELECT count(*) FROM {D}") == [(0,)]


def test_peek_shows_a_park_no_calendar_can_date(cli: Cli, tmp_path: Path) -> None:
    """``nack(lease, 1e308)`` is a valid park (until the end of time); peek printed nothing
    and failed with an OverflowError on it."""
    db = str(tmp_path / "far.db")
    with SqliteTransport(db) as q:
        q.publish("g", Event(kind="k"))
        lease = q.claim("w", 30)
        assert lease is not None and q.nack(lease, 1e308)
    text = cli("peek", "--db", db)
    assert text.returncode == 0, text.stderr
    assert "in 1e+308s" in text.stdout
    [row] = as_json(cli("peek", "--db", db, "--json"))
    assert row["lock_expiry"] == "epoch 1e+308 (no calendar date)"

"""``harel-sa db`` as a deploy pipeline runs it, prefixes compared as SQLite compares names, and
``--fresh``/``purge`` that never delete what harel_sa did not create."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from harel_sa import HEAD_REVISION, Event, SqliteTransport, migrations
from tests.cli.conftest import Cli, as_json, one_line_error, rows

OWN = "harel_transport_alembic_version"


def schema(path: Path) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()


def test_a_file_made_by_create_schema_reports_the_revision_it_is_at(cli: Cli, db: str) -> None:
    SqliteTransport(db).close()
    done = cli("db", "current", "--db", db)
    assert done.stdout.strip() == (f"{HEAD_REVISION} (at head), recorded in {OWN} (harel_sa's own)")
    assert cli("db", "check", "--db", db).returncode == 0
    assert (
        cli("db", "upgrade", "--db", db)
        .stdout.strip()
        .endswith(f"upgraded {HEAD_REVISION} -> {HEAD_REVISION}")
    )


def test_db_check_is_the_deploy_gate(cli: Cli, db: str) -> None:
    """Exit 0 only when what the transport checks is exactly at head."""
    migrations.upgrade(db)
    assert cli("db", "check", "--db", db).returncode == 0
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("DROP INDEX harel_transport_groups_by_priority")
        conn.commit()
    done = cli("db", "check", "--db", db, "--json")
    assert done.returncode == 1
    report = as_json(done)
    assert report["at_head"] is False and report["current"] == [HEAD_REVISION]
    assert report["missing"] == ["index harel_transport_groups_by_priority"]
    assert report["recorded_in"] == OWN
    # The fix the message names re-creates only what is missing.
    fix = report["problem"].split("or run `", 1)[1].split("`", 1)[0]
    then = report["problem"].split("then `", 1)[1].split("`", 1)[0]
    assert cli(*fix.split()[1:]).returncode == 0 and cli(*then.split()[1:]).returncode == 0
    assert cli("db", "check", "--db", db).returncode == 0


def test_an_unknown_revision_is_exit_2_with_a_plain_message(cli: Cli, tmp_path: Path) -> None:
    for command in (["upgrade"], ["downgrade"], ["stamp"]):
        path = tmp_path / "new.db"
        if command != ["upgrade"]:
            migrations.upgrade(path)
        before = schema(path) if path.exists() else None
        done = cli("db", *command, "--db", str(path), "--revision", "banana")
        line = one_line_error(done)
        assert done.returncode == 2
        assert line.startswith("harel-sa: unknown revision 'banana': harel_sa's revisions are ")
        assert HEAD_REVISION in line
        assert (schema(path) if path.exists() else None) == before
    assert one_line_error(cli("db", "sql", "--revision", "banana")).startswith(
        "harel-sa: unknown revision"
    )


def test_an_upgrade_to_an_older_revision_says_so_and_changes_nothing(cli: Cli, db: str) -> None:
    migrations.upgrade(db)
    before = schema(Path(db))
    done = cli("db", "upgrade", "--db", db, "--revision", "harel_sa_0002")
    line = one_line_error(done)
    assert done.returncode == 2
    assert f"harel_sa_0002 is older than prefix harel's {HEAD_REVISION}" in line
    assert "harel-sa db downgrade --db" in line and "--revision harel_sa_0002" in line
    done = cli("db", "downgrade", "--db", db, "--revision", HEAD_REVISION)
    assert done.returncode == 0  # already there: nothing to do
    migrations.downgrade(db, "harel_sa_0003")
    done = cli("db", "downgrade", "--db", db, "--revision", HEAD_REVISION)
    assert done.returncode == 2 and "is newer than prefix harel's harel_sa_0003" in done.stderr
    assert schema(Path(db)) != before  # only the API's downgrade moved it


def test_a_downgrade_that_would_destroy_rows_refuses_unless_forced(cli: Cli, db: str) -> None:
    with SqliteTransport(db) as q:
        q.publish("g", Event(kind="one"), routing_key="eu")
        lease = q.claim("w", 30.0)
        assert lease is not None and q.dead_letter(lease, "bad")
        q.publish("h", Event(kind="two"))
    before = schema(Path(db)), rows(db, "SELECT * FROM harel_transport_dead")
    done = cli("db", "downgrade", "--db", db, "--revision", "harel_sa_0002")
    line = one_line_error(done)
    assert done.returncode == 1
    assert "downgrading harel_sa_0003 under prefix 'harel' would destroy 1 dead letter(s)" in line
    assert "harel-sa dead requeue" in line and "--force" in line
    assert (schema(Path(db)), rows(db, "SELECT * FROM harel_transport_dead")) == before
    assert migrations.current(db) == (HEAD_REVISION,)  # one transaction: 0004's step undone too

    # Keep what can be kept: requeue the dead letter, then the routing key still refuses.
    assert cli("dead", "requeue", "--db", db).returncode == 0
    assert cli("db", "downgrade", "--db", db, "--revision", "harel_sa_0002").returncode == 0
    done = cli("db", "downgrade", "--db", db, "--revision", "base")
    assert done.returncode == 1 and "1 group routing key(s)" in done.stderr
    done = cli("db", "downgrade", "--db", db, "--revision", "base", "--force", "--json")
    assert done.returncode == 0 and as_json(done)["current"] == []
    assert rows(db, "SELECT name FROM sqlite_master WHERE name LIKE 'harel_transport_m%'") == []


def test_db_history_lists_the_revisions_oldest_first(cli: Cli) -> None:
    done = cli("db", "history", "--json")
    revisions = as_json(done)
    assert [r["revision"] for r in revisions] == [f"harel_sa_{n:04d}" for n in range(1, 11)]
    assert revisions[0]["down_revision"] is None and revisions[1]["down_revision"] == (
        "harel_sa_0001"
    )
    text = cli("db", "history").stdout.splitlines()
    assert text[-1].split()[:3] == [HEAD_REVISION, "harel_sa_0009", "head"]


def test_db_stamp_adopts_a_file_that_records_nothing(cli: Cli, db: str) -> None:
    """A file an older harel_sa made with create_schema=True has every table, no record."""
    SqliteTransport(db).close()
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(f"DROP TABLE {OWN}")
        conn.commit()
    done = cli("db", "check", "--db", db)
    assert done.returncode == 1 and "revision (none recorded)" in done.stdout
    done = cli("db", "stamp", "--db", db, "--revision", HEAD_REVISION)
    assert done.stdout.strip().endswith(f"stamped (none) -> {HEAD_REVISION}")
    assert cli("db", "check", "--db", db).returncode == 0


# --- prefixes -------------------------------------------------------------------------------


def test_a_prefix_in_another_case_is_the_same_queue(cli: Cli, db: str) -> None:
    with SqliteTransport(db) as q:
        q.publish("g", Event(kind="one"))
    tables = schema(Path(db))
    assert as_json(cli("stats", "--db", db, "--prefix", "Harel", "--json"))["messages"] == 1
    done = cli("db", "upgrade", "--db", db, "--prefix", "HAREL")
    assert done.stdout.strip() == (
        f"{db} (prefix harel): upgraded {HEAD_REVISION} -> {HEAD_REVISION}"
    )
    assert cli("db", "check", "--db", db, "--prefix", "Harel").returncode == 0
    assert schema(Path(db)) == tables  # no second queue under "Harel"


def test_a_prefix_with_no_queue_is_not_told_to_create_one(cli: Cli, db: str) -> None:
    SqliteTransport(db).close()
    SqliteTransport(db, prefix="jobs").close()
    for command in (["stats"], ["peek"], ["release"], ["dead", "list"]):
        done = cli(*command, "--db", db, "--prefix", "harle")
        line = one_line_error(done)
        assert done.returncode == 3
        assert line == "harel-sa: no harel_sa queue under prefix 'harle' here (found: harel, jobs)"
    done = cli("db", "check", "--db", db, "--prefix", "harle")
    assert done.returncode == 1 and "upgrade" not in done.stdout


# --- nothing deleted that harel_sa did not create ------------------------------------------


@pytest.fixture
def host_file(tmp_path: Path) -> Path:
    """An application's database: its own tables, and a harel queue with messages in it."""
    path = tmp_path / "app.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
        conn.execute("INSERT INTO items VALUES (1, 'keep me')")
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
        conn.execute("INSERT INTO alembic_version VALUES ('app_0001')")
        conn.commit()
    with SqliteTransport(path) as q:
        q.publish("g", Event(kind="left over"))
    return path


def theirs(path: Path) -> tuple[object, ...]:
    with closing(sqlite3.connect(path)) as conn:
        return (
            conn.execute("SELECT * FROM items").fetchall(),
            conn.execute("SELECT * FROM alembic_version").fetchall(),
            conn.execute(
                "SELECT sql FROM sqlite_master WHERE name IN ('items', 'alembic_version')"
            ).fetchall(),
        )


def test_the_demo_refuses_a_file_with_other_tables(cli: Cli, host_file: Path) -> None:
    before = theirs(host_file)
    done = cli("demo", "--db", str(host_file), "--messages", "20", "--groups", "2")
    line = one_line_error(done)
    assert done.returncode == 2 and ": alembic_version, items." in line and "--yes" in line
    assert theirs(host_file) == before
    assert rows(str(host_file), "SELECT count(*) FROM harel_transport_messages") == [(1,)]


def test_demo_fresh_yes_empties_only_the_prefixs_queue(cli: Cli, host_file: Path) -> None:
    before = theirs(host_file)
    done = cli(
        "demo", "--db", str(host_file), "--fresh", "--yes",
        "--messages", "40", "--groups", "4", "--workers", "1", "--no-progress",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "verified" in done.stdout
    assert theirs(host_file) == before


def test_purge_deletes_only_the_groups_messages(cli: Cli, host_file: Path) -> None:
    before = theirs(host_file)
    assert cli("purge", "--db", str(host_file), "--group", "g", "--yes").returncode == 0
    assert rows(str(host_file), "SELECT count(*) FROM harel_transport_messages") == [(0,)]
    assert theirs(host_file) == before


def test_an_upgrade_that_leaves_the_database_elsewhere_is_not_reported_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The revisions ran (here: were skipped) yet the database reads at another revision
    afterwards, as when the migrations' connection and the reading's reach different
    PostgreSQL schemas: exit 3 and a message, never "upgraded"."""
    from harel_sa import history
    from harel_sa.cli import main

    monkeypatch.setattr(history, "upgrade", lambda *args, **kwargs: None)
    code = main(["db", "upgrade", "--db", str(tmp_path / "q.db")])
    out, err = capsys.readouterr()
    assert code == 3
    assert "upgraded" not in out
    assert f"to {HEAD_REVISION}, but prefix harel reads at (none) afterwards" in err

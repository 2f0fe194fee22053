"""Integrated mode as a deploy pipeline runs it: a real ``alembic init`` host, its own
``alembic upgrade heads``, and ``harel-sa``/the transport reading the revision where the host
records it. Downgrades in the host name their branch and never destroy the queue unasked.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harel_sa import HEAD_REVISION, Event, Names, SchemaError, SqliteTransport
from tests.checks import first_call
from tests.migrations.helpers import connect, names_of, rows, run, version
from tests.migrations.host import Host, assert_upgrade_heads, make_host

HAREL_SA = Path(sys.executable).parent / "harel-sa"
OWN = Names().version_table


def harel_sa(host: Host, *args: str, ok: bool = True):  # type: ignore[no-untyped-def]
    return run([HAREL_SA, *args], cwd=host.root, ok=ok)


@pytest.fixture
def host(tmp_path: Path) -> Host:
    made = make_host(tmp_path / "host")
    assert_upgrade_heads(made)
    return made


def test_db_current_and_check_read_the_hosts_history(host: Host) -> None:
    current = harel_sa(host, "db", "current", "--db", "app.db").stdout
    assert current.strip() == (
        f"{HEAD_REVISION} (at head), recorded in alembic_version (your Alembic history)"
    )
    assert harel_sa(host, "db", "check", "--db", "app.db").returncode == 0
    named = harel_sa(host, "db", "check", "--db", "app.db", "--version-table", "alembic_version")
    assert "recorded in alembic_version" in named.stdout
    assert harel_sa(host, "stats", "--db", "app.db").returncode == 0
    assert OWN not in names_of(host.db, "table")  # nothing recorded beside the host's


def test_behind_in_the_host_is_told_to_run_the_hosts_upgrade_and_db_upgrade_refuses(
    host: Host,
) -> None:
    host.alembic("downgrade", "harel_sa@-1")
    done = harel_sa(host, "db", "check", "--db", "app.db", ok=False)
    assert done.returncode == 1
    assert "harel_sa_0009 (recorded in alembic_version, your Alembic history)" in done.stdout
    assert (
        "Run `alembic upgrade heads` (`flask db upgrade heads` with Flask-Migrate)" in done.stdout
    )
    assert "in your project's deploy pipeline" in done.stdout
    # Neither a second record nor a migration outside the pipeline: create_schema=True would
    # upgrade at a transport's start and rewrite the host's record.
    assert "harel-sa db upgrade" not in done.stdout and "create_schema" not in done.stdout
    done = harel_sa(host, "db", "upgrade", "--db", "app.db", ok=False)
    assert done.returncode == 2 and "kept by your Alembic history" in done.stderr
    assert OWN not in names_of(host.db, "table")
    with pytest.raises(SchemaError, match="alembic upgrade heads"):
        first_call(SqliteTransport(host.db, create_schema=False))
    host.alembic("upgrade", "heads")
    assert harel_sa(host, "db", "check", "--db", "app.db").returncode == 0


def test_two_records_that_disagree_are_an_error_with_the_command_that_fixes_it(
    host: Host,
) -> None:
    """The issue's trap: a stray own record (as an older ``harel-sa db upgrade`` made beside
    the host's), then ``alembic downgrade harel_sa@-1`` moves only the host's."""
    with connect(host.db) as conn:
        conn.execute(f"CREATE TABLE {OWN} (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
        conn.execute(f"INSERT INTO {OWN} VALUES ('{HEAD_REVISION}')")
    assert harel_sa(host, "db", "check", "--db", "app.db").returncode == 0  # they agree
    host.alembic("downgrade", "harel_sa@-1")
    done = harel_sa(host, "db", "check", "--db", "app.db", ok=False)
    assert done.returncode == 1
    assert "recorded twice, and the records disagree" in done.stdout
    assert f"{OWN} (harel_sa's own) says {HEAD_REVISION}" in done.stdout
    assert "alembic_version (your Alembic history) says harel_sa_0009" in done.stdout
    current = harel_sa(host, "db", "current", "--db", "app.db").stdout
    assert "recorded twice, and the records disagree" in current
    with pytest.raises(SchemaError, match="disagree"):
        first_call(SqliteTransport(host.db, create_schema=False))
    with pytest.raises(SchemaError, match="disagree"):
        SqliteTransport(host.db, create_schema=True)  # never picks one
    fix = done.stdout.split("drop harel_sa's own record with `", 1)[1].split("`", 1)[0]
    harel_sa(host, *fix.split()[1:])
    host.alembic("upgrade", "heads")
    assert harel_sa(host, "db", "check", "--db", "app.db").returncode == 0
    assert version(host.db) == []  # harel_sa's own record is gone; the host's remains


def test_a_transport_creating_the_schema_records_head_in_the_hosts_table(host: Host) -> None:
    host.alembic("downgrade", "harel_sa@-1")
    SqliteTransport(host.db, create_schema=True).close()
    assert version(host.db, table="alembic_version") == ["app_0001", HEAD_REVISION]
    assert OWN not in names_of(host.db, "table")
    assert f"{HEAD_REVISION} (head)" in host.alembic("current").stdout


def test_a_bare_minus_one_across_two_heads_refuses_and_names_the_branches(host: Host) -> None:
    done = host.alembic("downgrade", "-1", ok=False)
    assert done.returncode != 0
    assert f"with several heads (app_0001, {HEAD_REVISION}) would step back harel_sa's queue" in (
        done.stdout + done.stderr
    )
    assert version(host.db, table="alembic_version") == ["app_0001", HEAD_REVISION]
    host.alembic("downgrade", "app@-1")
    assert version(host.db, table="alembic_version") == [HEAD_REVISION]
    assert "items" not in names_of(host.db, "table")


def test_a_host_downgrade_that_would_destroy_the_queue_refuses_unless_forced(host: Host) -> None:
    with SqliteTransport(host.db, create_schema=False) as q:
        q.publish("g", Event(kind="kept"))
    before = rows(host.db, Names().messages, ["group_id", "event"])
    done = host.alembic("downgrade", "harel_sa@base", ok=False)
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "would destroy 1 queued or in-flight message(s)" in out and "-x force=1" in out
    # The plain recipe commits each step: the harmless ones before the refusal stay done
    # (app_0001 too: it depends on harel_sa_0002, so Alembic stepped it back first).
    assert version(host.db, table="alembic_version") == ["harel_sa_0001"]
    assert rows(host.db, Names().messages, ["group_id", "event"]) == before
    host.alembic("-x", "force=1", "downgrade", "harel_sa@base")
    assert not names_of(host.db, "table") & set(Names().tables)
    assert version(host.db, table="alembic_version") == []

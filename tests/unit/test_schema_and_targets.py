"""Names, the metadata, the start-up schema work, and the targets a transport accepts."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import create_async_engine

from harel_sa import (
    AsyncSqliteTransport,
    Event,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    Names,
    SchemaError,
    SqliteTransport,
    metadata,
)
from harel_sa.schema import on_dialect
from tests.checks import first_call
from tests.legacy import LegacyFile


def test_names_follow_the_prefix() -> None:
    n = Names("jobs")
    assert (n.messages, n.groups, n.dead) == (
        "jobs_transport_messages",
        "jobs_transport_groups",
        "jobs_transport_dead",
    )
    assert n.groups_by_last_claimed == "jobs_transport_groups_by_last_claimed"
    assert n.messages_by_group == "jobs_transport_messages_by_group"
    assert n.groups_by_routing_key == "jobs_transport_groups_by_routing_key"
    assert Names().prefix == "harel"


@pytest.mark.parametrize("prefix", ["a", "_", "A_b9", "x" * 30])
def test_good_prefixes(prefix: str) -> None:
    assert Names(prefix).prefix == prefix.lower()


def test_prefixes_differing_only_in_case_are_one_queue(tmp_path: Path) -> None:
    """SQLite's names ignore case, so harel_sa's do: ``Jobs`` then ``jobs`` in one file is one
    queue (not a SchemaError), and its tables are named in lower case."""
    path = tmp_path / "q.db"
    assert Names("Jobs") == Names("jobs") and Names("JOBS").messages == "jobs_transport_messages"
    with SqliteTransport(path, prefix="Jobs") as q:
        assert q.prefix == "jobs"
        q.publish("g", Event(kind="one"))
    with SqliteTransport(path, prefix="jobs", create_schema=False) as q:
        lease = q.claim("w", 30.0)
        assert lease is not None and lease.event.kind == "one"


def test_a_file_whose_tables_were_named_in_another_case_is_that_queue(tmp_path: Path) -> None:
    """The original transport names tables with the prefix as given (``Jobs_transport_*``)."""
    path = tmp_path / "q.db"
    legacy = LegacyFile(str(path), prefix="Jobs", routing_key=False)
    legacy.publish("g", "old-1")
    legacy.close()
    with pytest.raises(SchemaError, match="prefix 'jobs' is not at head"):
        first_call(SqliteTransport(path, prefix="jobs", create_schema=False))
    with SqliteTransport(path, prefix="JOBS") as q:  # upgraded in place, not a second queue
        lease = q.claim("w", 30.0)
        assert lease is not None and lease.event.kind == "old-1"
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    assert {"Jobs_transport_messages", "Jobs_transport_groups"} <= tables
    assert not {"jobs_transport_messages", "JOBS_transport_messages"} & tables


@pytest.mark.parametrize("prefix", ["", "9a", "a-b", "a b", "é", "x" * 31, "a;b", "a\n"])
def test_bad_prefixes_raise_value_error(prefix: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        Names(prefix)
    assert isinstance(info.value, ValueError)


def test_the_metadata_holds_the_design_tables_and_indexes() -> None:
    md = metadata("p")
    assert set(md.tables) == {
        "p_transport_messages",
        "p_transport_groups",
        "p_transport_dead",
        "p_transport_scheduled",
        "p_transport_periodic",
        "p_transport_controls",
    }
    controls = md.tables["p_transport_controls"]
    assert [c.name for c in controls.c] == ["target", "paused_at", "backoff_until"]
    assert [c.name for c in controls.primary_key] == ["target"] and not controls.indexes
    periodic = md.tables["p_transport_periodic"]
    assert [c.name for c in periodic.c] == ["name", "tick_at"]
    assert [c.name for c in periodic.primary_key] == ["name"] and not periodic.indexes
    groups = md.tables["p_transport_groups"]
    common = ["group_id", "last_claimed_at", "priority", "routing_key", "max_in_flight"]
    assert [c.name for c in groups.c if on_dialect(c, "sqlite")] == common
    assert [c.name for c in groups.c if on_dialect(c, "postgresql")] == [*common, "arrival"]
    # A group's limit (0010) on its row and on the rows that make it again; NULL: one at a time.
    for table in ("p_transport_groups", "p_transport_scheduled", "p_transport_dead"):
        limit = md.tables[table].c.max_in_flight
        assert limit.nullable and limit.server_default is None, table

    def indexes(dialect: str) -> dict[str | None, list[str]]:
        return {
            ix.name: [c.name for c in ix.columns]
            for ix in groups.indexes
            if on_dialect(ix, dialect)
        }

    # Ties go in arrival order: SQLite's index entries end with the rowid, PostgreSQL's name it.
    # SQLite's claim walks a lane per priority level on by_priority; PostgreSQL's walks one
    # partial index per floor (revision 0006).
    assert indexes("sqlite") == {
        "p_transport_groups_by_routing_key": ["routing_key", "last_claimed_at"],
        "p_transport_groups_by_priority": ["priority", "last_claimed_at"],
        "p_transport_groups_by_last_claimed": ["last_claimed_at"],
    }
    assert indexes("postgresql") == {
        "p_transport_groups_by_routing_key": ["routing_key", "last_claimed_at", "arrival"],
        **{f"p_transport_groups_by_floor{n}": ["last_claimed_at", "arrival"] for n in range(1, 5)},
        "p_transport_groups_by_last_claimed": ["last_claimed_at", "arrival"],
    }
    messages = md.tables["p_transport_messages"]
    assert [c.name for c in messages.c][:5] == [
        "seq",
        "group_id",
        "event",
        "locked_by",
        "lock_expiry",
    ]


def test_create_schema_false_on_an_empty_file_names_what_is_missing(db: str) -> None:
    Path(db).touch()
    with pytest.raises(SchemaError) as info:
        first_call(SqliteTransport(db, create_schema=False))
    text = str(info.value)
    assert text.startswith("no harel_sa queue under prefix 'harel' here: create it with")
    assert "harel-sa db upgrade" in text
    assert Path(db).stat().st_size == 0  # looked at, not written


def test_start_up_restores_a_dropped_index_and_then_the_check_passes(db: str) -> None:
    SqliteTransport(db).close()
    with sqlite3.connect(db) as raw:
        raw.execute("DROP INDEX harel_transport_groups_by_priority")
    with pytest.raises(SchemaError, match="index harel_transport_groups_by_priority"):
        first_call(SqliteTransport(db, create_schema=False))
    SqliteTransport(db).close()
    SqliteTransport(db, create_schema=False).close()


def test_transports_starting_together_do_not_race(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    db = str(tmp_path / "race.db")
    with ThreadPoolExecutor(8) as pool:
        for t in pool.map(lambda _: SqliteTransport(db), range(8)):
            t.close()
    SqliteTransport(db, create_schema=False).close()


def test_a_callers_engine_stays_theirs(db: str) -> None:
    engine = create_engine(f"sqlite:///{db}")

    def listeners() -> tuple[int, int]:
        return len(engine.pool.dispatch.connect), len(engine.dispatch.begin)

    before = listeners()
    with SqliteTransport(engine) as t:
        t.publish("g", Event(kind="x"))
        assert t.claim("w", 5).event.kind == "x"
    assert listeners() == before
    with engine.connect() as conn:  # the pooled connection came back as it was lent
        assert conn.connection.driver_connection.isolation_level == ""
    engine.dispose()


def test_a_callers_async_engine_stays_theirs(db: str) -> None:
    async def main() -> None:
        engine = create_async_engine(f"sqlite+aiosqlite:///{db}")
        async with await AsyncSqliteTransport.create(engine) as t:
            await t.publish("g", Event(kind="x"))
            lease = await t.claim("w", 5)
            assert lease is not None and lease.event.kind == "x"
        await engine.dispose()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("target", "error"),
    [
        ("postgresql://u@h/db", InvalidArgumentError),
        ("sqlite+aiosqlite:///x.db", InvalidArgumentError),
        (42, InvalidArgumentTypeError),
        ("", InvalidArgumentError),
    ],
)
def test_targets_the_sync_transport_refuses(target: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        SqliteTransport(target)


def test_a_url_and_a_path_reach_the_same_file(db: str) -> None:
    with SqliteTransport(db) as a, SqliteTransport(f"sqlite:///{db}") as b:
        a.publish("g", Event(kind="x"))
        assert b.claim("w", 5).event.kind == "x"


def test_create_schema_false_never_creates_a_file(tmp_path: Path) -> None:
    from harel_sa.migrations import check, current

    path = tmp_path / "absent.db"
    with pytest.raises(SchemaError, match="no database at"):
        SqliteTransport(str(path), create_schema=False)
    with pytest.raises(SchemaError, match="no database at"):
        asyncio.run(AsyncSqliteTransport.create(str(path), create_schema=False))
    assert current(str(path)) == () and check(str(path)) is False
    assert not path.exists()


def test_a_database_newer_than_this_package_is_named_as_such(db: str) -> None:
    from harel_sa import migrations

    migrations.upgrade(db)
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE harel_transport_alembic_version SET version_num = 'harel_sa_0099'")
    with pytest.raises(SchemaError, match="newer than this harel_sa"):
        first_call(SqliteTransport(db, create_schema=False))
    SqliteTransport(db).close()  # create_schema=True manages the schema itself: it opens

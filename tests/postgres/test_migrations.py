"""harel_sa's schema and revisions on a real PostgreSQL: the same metadata, the same revision
files (their PostgreSQL branches), harel_sa's own Alembic environment and ``harel-sa db``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.util import CommandError
from sqlalchemy import NullPool, create_engine

import harel_sa
from harel_sa import HEAD_REVISION, Names
from harel_sa import migrations as mig
from harel_sa.alembic_env import comparison, migration_url, only_harel_sa
from harel_sa.revision_state import read
from tests import forkserver, pg_cluster
from tests.migrations.test_revision_sql import golden

REPO = Path(__file__).resolve().parents[2]
JOBS = Names("jobs")


def sql(url: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def tables(url: str) -> set[str]:
    return {r[0] for r in sql(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}


def indexes(url: str, table: str) -> dict[str, str]:
    rows = sql(url, "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", (table,))
    return {str(name): str(ddl) for name, ddl in rows}


def diff(url: str, prefix: str = "harel") -> list[Any]:
    """What autogenerate finds between the database and ``harel_sa.metadata(prefix)``, types
    and server defaults compared, as harel_sa's environment compares on PostgreSQL."""
    engine = create_engine(migration_url(url), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            opts = {"include_name": only_harel_sa(prefix), "compare_type": True}
            context = MigrationContext.configure(conn, opts={**opts, **comparison("postgresql")})
            return list(compare_metadata(context, harel_sa.metadata(prefix)))
    finally:
        engine.dispose()


def test_upgrade_from_empty_builds_the_metadata_and_records_head(pg_url: str) -> None:
    assert not mig.check(pg_url)
    mig.upgrade(pg_url)
    assert mig.current(pg_url) == (HEAD_REVISION,)
    assert mig.check(pg_url)
    assert diff(pg_url) == []
    command.check(mig.config(pg_url))  # `alembic check`: raises on any difference
    names = Names()
    assert tables(pg_url) == {*names.tables, names.version_table}
    columns = dict(
        sql(
            pg_url,
            "SELECT column_name || '.' || table_name, data_type || ' ' || is_identity "
            "FROM information_schema.columns WHERE table_schema = 'public'",
        )
    )
    assert columns[f"seq.{names.messages}"] == "bigint YES"
    assert columns[f"seq.{names.dead}"] == "bigint NO"
    assert columns[f"arrival.{names.groups}"] == "bigint YES"
    assert columns[f"lock_expiry.{names.messages}"] == "double precision NO"
    assert columns[f"last_claimed_at.{names.groups}"] == "double precision NO"
    ddl = indexes(pg_url, names.groups)
    assert ddl[names.groups_by_last_claimed].endswith("(last_claimed_at, arrival)")
    for floor in range(1, 5):
        assert ddl[names.groups_by_floor(floor)].endswith(
            f"(last_claimed_at, arrival) WHERE (priority >= {floor})"
        )
    assert names.groups_by_priority not in ddl  # SQLite's; gone from PostgreSQL in 0006
    assert ddl[names.groups_by_routing_key].endswith(
        "(routing_key, last_claimed_at, arrival) WHERE (routing_key IS NOT NULL)"
    )


def test_the_comparison_sees_what_is_missing_or_different(pg_url: str) -> None:
    """The clean comparison above could not be clean by accident: a dropped index, a changed
    type and the arrival column gone are each reported, and the reading says what is missing."""
    mig.upgrade(pg_url)
    names = Names()
    sql(pg_url, f"DROP INDEX {names.groups_by_floor(3)}")
    sql(pg_url, f"ALTER TABLE {names.messages} ALTER COLUMN lock_expiry TYPE real")
    sql(pg_url, f"ALTER TABLE {names.groups} DROP COLUMN arrival")  # its index goes with it
    found = {(d[0][0] if isinstance(d, list) else d[0]) for d in diff(pg_url)}
    assert {"add_index", "modify_type", "add_column"} <= found
    with pytest.raises(CommandError):
        command.check(mig.config(pg_url))
    with psycopg.connect(pg_url) as conn:
        state = read(conn, names)
    assert not state.ok
    assert set(state.missing) == {  # the indexes over arrival went with it
        f"column {names.groups}.arrival",
        f"index {names.groups_by_last_claimed}",
        f"index {names.groups_by_routing_key}",
        *(f"index {names.groups_by_floor(floor)}" for floor in range(1, 5)),
    }


def test_each_revision_leaves_what_sqlite_has_at_it(pg_url: str) -> None:
    mig.upgrade(pg_url, revision="harel_sa_0001")
    names = Names()
    assert tables(pg_url) == {names.messages, names.groups, names.version_table}
    mig.upgrade(pg_url, revision="harel_sa_0002")
    assert names.groups_by_routing_key in indexes(pg_url, names.groups)
    mig.upgrade(pg_url, revision="harel_sa_0003")
    assert names.dead in tables(pg_url)
    mig.upgrade(pg_url, revision="harel_sa_0004")
    assert names.groups_by_priority in indexes(pg_url, names.groups)
    assert not mig.check(pg_url)
    mig.upgrade(pg_url)
    assert mig.check(pg_url)
    floors = {names.groups_by_floor(floor) for floor in range(1, 5)}
    assert floors <= set(indexes(pg_url, names.groups))
    assert names.groups_by_priority not in indexes(pg_url, names.groups)
    # 0006 steps back to 0005's indexes, and forward again
    mig.downgrade(pg_url, revision="harel_sa_0005")
    at_0005 = indexes(pg_url, names.groups)
    assert names.groups_by_priority in at_0005 and not floors & set(at_0005)
    assert at_0005[names.groups_by_routing_key].endswith(
        "(routing_key, last_claimed_at)" + " WHERE (routing_key IS NOT NULL)"
    )
    mig.upgrade(pg_url)
    assert mig.check(pg_url)


def _fill(url: str, names: Names) -> None:
    sql(
        url,
        f"INSERT INTO {names.groups} (group_id, priority, routing_key) "
        "VALUES ('a', 0, NULL), ('b', 2, NULL)",
    )
    sql(
        url,
        f"INSERT INTO {names.messages} (group_id, event, deliveries, enqueued_at) "
        "VALUES ('a', '{\"kind\": \"one\"}', 0, 5.0), ('b', '{\"kind\": \"two\"}', 0, 6.0)",
    )


def test_downgrades_keep_rows_where_sqlite_keeps_them_and_refuse_where_it_refuses(
    pg_url: str,
) -> None:
    names = Names()
    mig.upgrade(pg_url)
    _fill(pg_url, names)
    kept = f"SELECT group_id, event FROM {names.messages} ORDER BY seq"
    before = sql(pg_url, kept)
    mig.downgrade(pg_url, "harel_sa_0002")  # no dead letters, no deliveries: nothing is lost
    assert mig.current(pg_url) == ("harel_sa_0002",)
    assert sql(pg_url, kept) == before
    assert names.dead not in tables(pg_url)
    mig.upgrade(pg_url)
    assert mig.check(pg_url) and diff(pg_url) == []
    assert sql(pg_url, kept) == before
    assert sql(pg_url, f"SELECT group_id FROM {names.groups} ORDER BY arrival") == [("a",), ("b",)]

    sql(pg_url, f"UPDATE {names.groups} SET routing_key = 'gpu' WHERE group_id = 'b'")
    with pytest.raises(CommandError, match="would destroy 1 group routing key"):
        mig.downgrade(pg_url, "harel_sa_0001")
    # On PostgreSQL each revision is a transaction of its own (their steps run outside one,
    # online): the run stops at the refused step, which changed nothing; the steps before it
    # are done, and every row is still there.
    assert mig.current(pg_url) == ("harel_sa_0002",)
    assert sql(pg_url, kept) == before
    assert sql(pg_url, f"SELECT routing_key FROM {names.groups} WHERE group_id = 'b'") == [("gpu",)]
    sql(pg_url, f"UPDATE {names.groups} SET routing_key = NULL")
    with pytest.raises(CommandError, match="would destroy 2 queued or in-flight"):
        mig.downgrade(pg_url, "base", force=False)
    mig.downgrade(pg_url, "base", force=True)
    assert tables(pg_url) == {names.version_table}


def test_two_prefixes_share_a_database_and_move_apart(pg_url: str) -> None:
    mig.upgrade(pg_url)
    mig.upgrade(pg_url, prefix="jobs", revision="harel_sa_0003")
    assert mig.current(pg_url) == (HEAD_REVISION,)
    assert mig.current(pg_url, prefix="jobs") == ("harel_sa_0003",)
    assert mig.check(pg_url) and not mig.check(pg_url, prefix="jobs")
    mig.upgrade(pg_url, prefix="jobs")
    assert diff(pg_url, "jobs") == [] and diff(pg_url) == []
    mig.downgrade(pg_url, "base", prefix="jobs")
    assert mig.check(pg_url)
    assert not any(
        t.startswith("jobs_transport_") and t != JOBS.version_table for t in tables(pg_url)
    )
    with psycopg.connect(pg_url) as conn:
        assert read(conn, Names()).others == ()


def harel_sa_db(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harel_sa", "db", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_db_commands_on_a_postgresql_url(pg_url: str) -> None:
    empty = harel_sa_db("check", "--url", pg_url)
    assert empty.returncode == 1, empty.stderr
    assert "no harel_sa queue under prefix 'harel'" in empty.stdout
    behind = harel_sa_db("upgrade", "--url", pg_url, "--revision", "harel_sa_0004")
    assert behind.returncode == 0, behind.stderr
    assert "upgraded (none) -> harel_sa_0004" in behind.stdout
    assert harel_sa_db("check", "--url", pg_url).returncode == 1
    done = harel_sa_db("upgrade", "--url", pg_url)
    assert done.returncode == 0, done.stderr
    current = harel_sa_db("current", "--url", pg_url)
    assert current.returncode == 0
    assert current.stdout.startswith(f"{HEAD_REVISION} (at head)")
    ok = harel_sa_db("check", "--url", pg_url)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith(f"ok: prefix harel is at head ({HEAD_REVISION})")
    nowhere = pg_url.replace("/harel_sa_test", "/no_such_database_", 1)
    assert nowhere != pg_url
    gone = harel_sa_db("check", "--url", nowhere)
    assert gone.returncode == 1, gone.stdout + gone.stderr  # cannot connect: exit 1 everywhere
    assert "cannot connect to" in gone.stderr and 'database "no_such_database_' in gone.stderr
    printed = harel_sa_db(
        "sql", "--url", pg_url, "--prefix", "jobs", "--revision", "base:harel_sa_0001"
    )
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == golden("harel_sa_0001", "jobs", "postgresql")


def test_the_alembic_command_runs_harel_sa_environment_on_postgresql(pg_url: str) -> None:
    alembic = Path(sys.executable).parent / "alembic"
    done = subprocess.run(
        [str(alembic), "-x", f"url={pg_url}", "-x", "prefix=jobs", "upgrade", "heads"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    checked = subprocess.run(
        [str(alembic), "-x", f"url={pg_url}", "-x", "prefix=jobs", "check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "No new upgrade operations detected" in checked.stdout + checked.stderr
    assert mig.check(pg_url, prefix="jobs")


def test_the_offline_sql_applied_by_hand_builds_the_schema_at_head(
    pg_url: str, tmp_path: Path
) -> None:
    """As a DBA applies it: ``psql -f`` (each statement sent alone, so the CONCURRENTLY index
    builds run outside a transaction, as the script's COMMIT before them says)."""
    script = tmp_path / "upgrade.sql"
    script.write_text(mig.sql(prefix="jobs", url=pg_url))
    psql = shutil.which("psql") or str(Path(pg_cluster.bindir() or "/usr/bin") / "psql")
    subprocess.run(
        [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", str(script), pg_url], check=True
    )
    assert mig.current(pg_url, prefix="jobs") == (HEAD_REVISION,)
    assert mig.check(pg_url, prefix="jobs")
    assert diff(pg_url, "jobs") == []


def _upgrade(url: str, start: Any) -> None:
    start.wait()
    mig.upgrade(url, prefix="jobs")


def test_concurrent_upgrades_serialize(pg_url: str) -> None:
    """Processes that upgrade one prefix at the same moment take turns on the advisory lock:
    every one succeeds, and the database is at head once, with one record."""
    ctx = forkserver.context()
    start = ctx.Event()
    procs = [ctx.Process(target=_upgrade, args=(pg_url, start)) for _ in range(4)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert sql(pg_url, f"SELECT version_num FROM {JOBS.version_table}") == [(HEAD_REVISION,)]
    assert mig.check(pg_url, prefix="jobs") and diff(pg_url, "jobs") == []


def test_without_the_lock_concurrent_creates_collide(pg_url: str) -> None:
    """What the lock is for: ``IF NOT EXISTS`` does not serialize two transactions creating one
    table on PostgreSQL; the second waits for the first, then fails once it commits."""
    first = psycopg.connect(pg_url)
    second = psycopg.connect(pg_url)
    outcome: list[BaseException | None] = []

    def create() -> None:
        try:
            second.execute("CREATE TABLE IF NOT EXISTS raced (x int)")
            outcome.append(None)
        except psycopg.Error as exc:
            outcome.append(exc)

    try:
        first.execute("CREATE TABLE IF NOT EXISTS raced (x int)")  # not committed yet
        racer = threading.Thread(target=create)
        racer.start()
        racer.join(0.5)
        assert racer.is_alive()  # waiting for the first transaction
        first.commit()
        racer.join(30)
        assert len(outcome) == 1 and isinstance(outcome[0], psycopg.errors.UniqueViolation)
    finally:
        first.close()
        second.close()


def in_schema(url: str, schema: str) -> str:
    """``url`` with libpq's ``options`` naming ``schema`` as the search_path."""
    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"


def tables_in(url: str, schema: str) -> set[str]:
    rows = sql(url, "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))
    return {str(row[0]) for row in rows}


def test_a_schema_named_by_the_urls_search_path_holds_the_queue(pg_url: str) -> None:
    """A PostgreSQL schema is chosen as libpq chooses it (``options=-csearch_path=...`` in
    the URL): the migrations, the reading of the schema state, ``alembic check`` and the
    transports all reach that schema, and the same prefix in ``public`` is another queue."""
    sql(pg_url, "CREATE SCHEMA app")
    app = in_schema(pg_url, "app")
    done = harel_sa_db("upgrade", "--url", app)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"upgraded (none) -> {HEAD_REVISION}" in done.stdout
    names = Names()
    assert tables_in(pg_url, "app") == {*names.tables, names.version_table}
    assert tables(pg_url) == set()  # nothing in public
    assert harel_sa_db("check", "--url", app).returncode == 0
    assert harel_sa_db("check", "--url", pg_url).returncode == 1
    assert mig.check(app) and not mig.check(pg_url)
    assert diff(app) == []
    alembic = Path(sys.executable).parent / "alembic"
    checked = subprocess.run(
        [str(alembic), "-x", f"url={app}", "check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "No new upgrade operations detected" in checked.stdout + checked.stderr
    with harel_sa.PostgresTransport(app, create_schema=False) as in_app:
        in_app.publish("g", harel_sa.Event(kind="in app"))
        with harel_sa.PostgresTransport(pg_url) as in_public:  # makes its own tables
            assert in_public.claim("w", 30) is None
            in_public.publish("g", harel_sa.Event(kind="in public"))
        lease = in_app.claim("w", 30)
        assert lease is not None and lease.event.kind == "in app"
    assert tables(pg_url) == {*names.tables, names.version_table}


def test_pgoptions_choose_the_schema_for_the_migrations_too(pg_url: str) -> None:
    """libpq's PGOPTIONS (no ``options`` in the URL) reach the migrations' connection as
    they reach the reading's: the upgrade lands where ``check`` then looks."""
    sql(pg_url, "CREATE SCHEMA ops")
    env = {**os.environ, "PGOPTIONS": "-csearch_path=ops"}
    done = subprocess.run(
        [sys.executable, "-m", "harel_sa", "db", "upgrade", "--url", pg_url],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"upgraded (none) -> {HEAD_REVISION}" in done.stdout
    assert tables_in(pg_url, "ops") == {*Names().tables, Names().version_table}
    assert tables(pg_url) == set()


def test_the_db_commands_work_whatever_client_encoding_the_url_asks_for(pg_url: str) -> None:
    """With SQL_ASCII, psycopg reads texts as bytes (SQLAlchemy's reading of the server version
    failed on them); the migrations' connections speak UTF-8 whatever the URL says."""
    url = f"{pg_url}&options=-cclient_encoding%3DSQL_ASCII"
    done = harel_sa_db("upgrade", "--url", url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"upgraded (none) -> {HEAD_REVISION}" in done.stdout
    checked = harel_sa_db("check", "--url", url)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert diff(pg_url) == []

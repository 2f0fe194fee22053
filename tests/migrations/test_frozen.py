"""Frozen revisions: what each revision runs is checked in (``golden/``, its ``alembic upgrade
--sql`` output for ``N-1:N`` under the default prefix and another), so any change to a released
revision fails here; the transport's start-up runs the same statements (:mod:`harel_sa.frozen`)
and leaves the very file the revisions leave, from every kind of start.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

from harel_sa import HEAD_REVISION, Names, SqliteTransport, frozen
from harel_sa import migrations as mig
from tests.conftest import FakeClock
from tests.migrations.helpers import alembic, connect, snapshot, sqlite_master, version
from tests.migrations.starts import STARTS

GOLDEN = Path(__file__).parent / "golden"
REVISIONS = [rev for rev, _ in frozen.REVISIONS]
RANGES = list(zip(["base", *REVISIONS[:-1]], REVISIONS, strict=True))
PREFIXES = ["harel", "jobs"]


def golden(revision: str, prefix: str) -> str:
    return (GOLDEN / f"{revision}.{prefix}.sql").read_text()


def statements(sql_text: str) -> list[str]:
    """The statements of an ``--sql`` script, without Alembic's own (transaction and version
    table) and comments."""
    found = []
    for chunk in sql_text.split(";\n"):
        lines = [ln for ln in chunk.strip().splitlines() if not ln.startswith("--")]
        stmt = "\n".join(lines).strip()
        if stmt and stmt not in ("BEGIN", "COMMIT") and "alembic_version" not in stmt:
            found.append(stmt)
    return found


def test_every_revision_has_its_golden_files_and_nothing_else_is_there() -> None:
    assert mig.heads() == (REVISIONS[-1],) == (HEAD_REVISION,)
    assert sorted(p.name for p in GOLDEN.iterdir()) == sorted(
        f"{rev}.{prefix}.sql" for rev in REVISIONS for prefix in PREFIXES
    )


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize(("start", "revision"), RANGES)
def test_each_revision_prints_exactly_its_golden_sql(
    start: str, revision: str, prefix: str
) -> None:
    assert mig.sql(prefix=prefix, revision=f"{start}:{revision}") == golden(revision, prefix)


def test_the_alembic_command_prints_the_golden_sql_too() -> None:
    """As a pipeline would review it: ``alembic upgrade A:B --sql`` from the repository."""
    done = alembic("-x", "prefix=jobs", "upgrade", "harel_sa_0002:harel_sa_0003", "--sql")
    assert done.stdout == golden("harel_sa_0003", "jobs")


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("revision", REVISIONS)
def test_start_up_runs_each_revisions_own_statements(revision: str, prefix: str) -> None:
    """Statement for statement, the start-up's frozen SQL is the revision's (all guards off,
    as ``--sql`` prints them)."""
    mine = frozen.statements(Names(prefix), revision)
    assert mine == statements(golden(revision, prefix))
    assert mine  # a revision that runs nothing would make this vacuous


def test_the_version_table_is_made_as_alembic_makes_it() -> None:
    text = golden("harel_sa_0001", "jobs")
    table = Names("jobs").version_table
    assert frozen.VERSION_TABLE.format(table=table).replace("\t", "    ") + ";" in text


def at_revision(revision: str):  # type: ignore[no-untyped-def]
    def build(path: Path, clock: FakeClock) -> None:
        STARTS["stdlib3-orphans"](path, clock)
        mig.upgrade(path, revision=revision)

    return build


BUILDERS = {name: STARTS[name] for name in STARTS if name != "create_schema"} | {
    f"at-{rev}": at_revision(rev) for rev in REVISIONS[:-1]
}


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("start", list(BUILDERS))
def test_start_up_and_the_revisions_leave_the_same_file(
    tmp_path: Path, start: str, prefix: str, clock: FakeClock
) -> None:
    """``SqliteTransport(create_schema=True)`` and ``harel-sa db upgrade`` on copies of one
    file: the same ``sqlite_master`` (version table included), rows and recorded revision."""
    by_startup, by_alembic = tmp_path / "startup.db", tmp_path / "alembic.db"
    BUILDERS[start](by_startup, clock)
    if prefix != "harel":  # the same start under another prefix: rename the tables
        rename(by_startup, "harel", prefix)
    shutil.copyfile(by_startup, by_alembic)  # closed: nothing left in a -wal file
    SqliteTransport(by_startup, prefix=prefix, clock=clock).close()
    mig.upgrade(by_alembic, prefix=prefix)
    assert sqlite_master(by_startup) == sqlite_master(by_alembic)
    assert snapshot(by_startup, prefix) == snapshot(by_alembic, prefix)
    assert version(by_startup, prefix) == version(by_alembic, prefix) == [HEAD_REVISION]


def rename(path: Path, old: str, new: str) -> None:
    """Move a file's ``old`` queue (tables, indexes, version table) to prefix ``new``."""
    with connect(path) as conn:
        objects = conn.execute(
            "SELECT type, name, sql FROM sqlite_master "
            "WHERE name LIKE ? ESCAPE '\\' AND sql IS NOT NULL",
            (f"{old}\\_%",),
        ).fetchall()
        conn.execute("BEGIN")
        for kind, name, _ in objects:
            if kind == "table":
                conn.execute(f"ALTER TABLE {name} RENAME TO {new}{name[len(old) :]}")
        for kind, name, sql in objects:
            if kind == "index":
                conn.execute(f"DROP INDEX {name}")
                conn.execute(re.sub(rf"\b{old}_", f"{new}_", sql))
        conn.execute("COMMIT")
        left = conn.execute("SELECT name FROM sqlite_master WHERE name LIKE 'harel%'").fetchall()
    assert old != "harel" or left == [], left


def test_revisions_import_nothing_of_harel_sa() -> None:
    """A released revision must mean the same forever: it spells its SQL and guards, and
    imports only Alembic and the standard library."""
    for path in Path(mig.version_location()).glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {
            f"{node.module}.{alias.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        } | {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        assert imported <= {
            "__future__.annotations",
            "re",
            "collections.abc.Sequence",
            "alembic.context",
            "alembic.op",
            "alembic.util.CommandError",
        }, path.name
        assert "harel_sa." not in path.read_text().replace("harel_sa.migrations", ""), path.name

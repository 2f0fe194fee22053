"""Safe DDL: harel_sa's environment runs the whole upgrade as one ``BEGIN IMMEDIATE``
transaction, so a revision that raises half-way leaves nothing behind (the revisions before it
in the same run are rolled back too), and processes upgrading at once serialize.
"""

from __future__ import annotations

import logging
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.config import Config

from harel_sa import HEAD_REVISION
from harel_sa import migrations as mig
from tests import forkserver
from tests.conftest import FakeClock
from tests.migrations.helpers import (
    REPO,
    alembic,
    assert_schema_is_metadata,
    connect,
    snapshot,
    sqlite_master,
    version,
)
from tests.migrations.starts import STARTS

BOOM = textwrap.dedent(
    '''
    """A revision that fails half-way: it creates a table, rewrites rows, then raises."""

    import sqlalchemy as sa
    from alembic import op

    revision = "harel_sa_0011"
    down_revision = "harel_sa_0010"
    branch_labels = None
    depends_on = None


    def upgrade():
        op.create_table("boom_half_made", sa.Column("id", sa.Integer, primary_key=True))
        op.execute("UPDATE harel_transport_messages SET locked_by = 'boom'")
        op.execute("DELETE FROM harel_transport_groups")
        raise RuntimeError("boom half-way")


    def downgrade():
        op.drop_table("boom_half_made")
    '''
)


@pytest.fixture
def broken_scripts(tmp_path: Path) -> Path:
    """A copy of harel_sa's migrations directory with a failing ``harel_sa_0011`` on top."""
    copy = tmp_path / "broken_migrations"
    shutil.copytree(
        REPO / "migrations", copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    (copy / "versions" / "harel_sa_0011_boom.py").write_text(BOOM)
    return copy


def broken_config(path: Path, scripts: Path) -> Config:
    cfg = mig.config(path)
    cfg.set_main_option("script_location", str(scripts))
    return cfg


def at_0002_with_rows(path: Path) -> None:
    STARTS["stdlib3-orphans"](path, FakeClock())
    mig.upgrade(path, revision="harel_sa_0002")


@pytest.mark.parametrize(
    "start",
    ["empty", "stdlib3-orphans", "create_schema", "at_0002", "at_head"],
)
def test_a_revision_that_raises_half_way_leaves_schema_rows_and_version_as_before(
    start: str, tmp_path: Path, broken_scripts: Path
) -> None:
    path = tmp_path / "queue.db"
    if start == "at_0002":
        at_0002_with_rows(path)
    elif start == "at_head":
        STARTS["stdlib4"](path, FakeClock())
        mig.upgrade(path)
    else:
        STARTS[start](path, FakeClock())
    schema, rows, recorded = sqlite_master(path), snapshot(path), version(path)

    with pytest.raises(RuntimeError, match="boom half-way"):
        command.upgrade(broken_config(path, broken_scripts), "heads")

    # Not only 0006's table and row changes: every revision this run applied before it
    # (0001-0004 from an empty or unversioned file, 0003-0004 from 0002) is undone too.
    assert sqlite_master(path) == schema
    assert snapshot(path) == rows
    assert version(path) == recorded

    # The file is as good as before: the real history brings it to head.
    mig.upgrade(path)
    assert version(path) == [HEAD_REVISION]
    assert_schema_is_metadata(path)


def test_the_command_line_rolls_back_the_same_way(tmp_path: Path, broken_scripts: Path) -> None:
    path = tmp_path / "queue.db"
    at_0002_with_rows(path)
    schema, rows = sqlite_master(path), snapshot(path)
    ini = tmp_path / "broken.ini"
    ini.write_text(f"[alembic]\nscript_location = {broken_scripts}\npath_separator = space\n")
    done = alembic("-c", str(ini), "-x", f"url=sqlite:///{path}", "upgrade", "heads", ok=False)
    assert done.returncode != 0 and "boom half-way" in done.stderr
    assert sqlite_master(path) == schema
    assert snapshot(path) == rows
    assert version(path) == ["harel_sa_0002"]


def _statements_of(revision: str, down: str | None) -> list[str]:
    """The statements ``revision`` emits offline, without the version bookkeeping."""
    span = f"{down}:{revision}" if down else revision
    text = mig.sql(revision=span)
    body = text.split(f"-> {revision}", 1)[1].split("-- Running upgrade", 1)[0]
    return [
        s.strip()
        for s in body.split(";\n")
        if s.strip()
        and "alembic_version" not in s
        and s.strip() not in ("COMMIT", "BEGIN")
        and not s.strip().startswith("--")
    ]


REVISIONS = [
    ("harel_sa_0001", None),
    ("harel_sa_0002", "harel_sa_0001"),
    ("harel_sa_0003", "harel_sa_0002"),
    ("harel_sa_0004", "harel_sa_0003"),
    ("harel_sa_0005", "harel_sa_0004"),
    ("harel_sa_0006", "harel_sa_0005"),  # nothing on SQLite: no crash point
    ("harel_sa_0007", "harel_sa_0006"),
    ("harel_sa_0008", "harel_sa_0007"),
    ("harel_sa_0009", "harel_sa_0008"),
    ("harel_sa_0010", "harel_sa_0009"),
]
CRASHES = [
    (rev, down, k) for rev, down in REVISIONS for k in range(1, len(_statements_of(rev, down)) + 1)
]


@pytest.mark.parametrize(("revision", "down", "applied"), CRASHES)
def test_a_rerun_after_a_crash_inside_a_revision_succeeds(
    revision: str, down: str | None, applied: int, tmp_path: Path
) -> None:
    """A host's plain environment commits statement by statement: a crash inside a revision
    leaves some of its statements applied and the version not moved. Every step is guarded,
    so running the upgrade again finishes the job."""
    path = tmp_path / "queue.db"
    STARTS["stdlib3-orphans"](path, FakeClock())
    if down:
        mig.upgrade(path, revision=down)
    before = snapshot(path)
    with connect(path) as conn:  # autocommit: each statement stays, as the crash left it
        for statement in _statements_of(revision, down)[:applied]:
            conn.execute(statement)
    assert version(path) == ([down] if down else [])

    mig.upgrade(path)
    assert version(path) == [HEAD_REVISION]
    assert_schema_is_metadata(path)
    for table, (cols, old) in before.items():
        new = snapshot(path)[table][1]
        assert [r[: len(cols)] for r in new][: len(old)] == old, table


def _upgrade_together(path: str, barrier: Any, results: Any) -> None:
    runs: list[str] = []

    class Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("Running upgrade"):
                runs.append(record.getMessage())

    logger = logging.getLogger("alembic.runtime.migration")
    logger.setLevel(logging.INFO)
    logger.addHandler(Count())
    barrier.wait()
    mig.upgrade(path)
    results.put(len(runs))


def test_processes_upgrading_one_empty_file_at_once_serialize(tmp_path: Path) -> None:
    path = str(tmp_path / "queue.db")
    ctx = forkserver.context()
    barrier, results = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=_upgrade_together, args=(path, barrier, results)) for _ in "abc"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    runs = sorted(results.get(timeout=5) for _ in procs)
    # One process ran the four revisions; the others waited for its lock, then found head.
    # (Without BEGIN IMMEDIATE they race: two run the history, one fails on the version row.)
    assert runs == [0, 0, len(REVISIONS)]
    assert version(path) == [HEAD_REVISION]
    assert_schema_is_metadata(path)

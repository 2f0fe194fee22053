"""What the migration tests look at: files on disk, their schema and rows, and real commands.

Everything reads the SQLite file through its own short-lived connection, so a test sees what
another process (or a later transport) would see.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import NullPool, create_engine
from sqlalchemy.dialects import sqlite
from sqlalchemy.schema import CreateIndex

import harel_sa
from harel_sa import Names, SqliteTransport
from harel_sa.alembic_env import on_this_dialect, only_harel_sa, server_defaults
from harel_sa.schema import on_dialect

REPO = Path(__file__).resolve().parents[2]
#: The ``alembic`` command of the environment running the tests (``.venv/bin/alembic``).
ALEMBIC = Path(sys.executable).parent / "alembic"
VIS = 30.0

Row = tuple[Any, ...]


@contextmanager
def connect(path: Path | str) -> Iterator[sqlite3.Connection]:
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        yield conn


def sqlite_master(path: Path | str) -> list[Row]:
    """Every schema object of the file: what "the schema is unchanged" compares."""
    with connect(path) as conn:
        return conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name"
        ).fetchall()


def names_of(path: Path | str, kind: str) -> set[str]:
    with connect(path) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = ?", (kind,)).fetchall()
    return {str(r[0]) for r in rows}


def columns(path: Path | str, table: str) -> list[str]:
    with connect(path) as conn:
        return [str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")]


def rows(path: Path | str, table: str, cols: Sequence[str] | None = None) -> list[Row]:
    """The rows of ``table`` (only ``cols`` when given) in rowid order."""
    with connect(path) as conn:
        what = ", ".join(cols) if cols else "*"
        return conn.execute(f"SELECT {what} FROM {table} ORDER BY rowid").fetchall()


def snapshot(path: Path | str, prefix: str = "harel") -> dict[str, tuple[list[str], list[Row]]]:
    """Each of ``prefix``'s tables present in the file: its columns and every row."""
    present = names_of(path, "table")
    return {
        table: (columns(path, table), rows(path, table))
        for table in Names(prefix).tables
        if table in present
    }


def assert_rows_kept(
    path: Path | str, before: dict[str, tuple[list[str], list[Row]]], *, adopted: Sequence[Row] = ()
) -> None:
    """Every row ``before`` held is still there, column for column; the groups table may also
    hold ``adopted`` rows (group rows given to orphaned messages), and nothing else."""
    for table, (cols, old) in before.items():
        new = rows(path, table, cols)
        if table.endswith("_transport_groups"):
            extra = [r for r in new if r not in old]
            assert [r for r in new if r in old] == old, table
            assert sorted(extra, key=repr) == sorted(adopted, key=repr), table
        else:
            assert new == old, table


def version(path: Path | str, prefix: str = "harel", table: str | None = None) -> list[str]:
    """The revisions recorded in ``prefix``'s version table (or ``table``); [] when absent."""
    table = table or Names(prefix).version_table
    if table not in names_of(path, "table"):
        return []
    return sorted(str(r[0]) for r in rows(path, table))


def schema_diff(path: Path | str, prefix: str = "harel") -> list[Any]:
    """What Alembic's autogenerate finds between the file and ``harel_sa.metadata(prefix)``
    (types and server defaults compared too), restricted to ``prefix``'s tables."""
    engine = create_engine(f"sqlite:///{path}", poolclass=NullPool)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn,
                opts={
                    "include_name": only_harel_sa(prefix),
                    "include_object": on_this_dialect("sqlite"),
                    "compare_type": True,
                    "compare_server_default": server_defaults,
                },
            )
            return list(compare_metadata(context, harel_sa.metadata(prefix)))
    finally:
        engine.dispose()


def _normal(sql: str) -> str:
    return " ".join(sql.replace("(", " ( ").replace(")", " ) ").replace(",", " , ").split()).lower()


def index_mismatches(path: Path | str, prefix: str = "harel") -> dict[str, tuple[str, str]]:
    """Indexes whose stored DDL differs from the metadata's (``{name: (file, metadata)}``).

    Alembic's comparison ignores a partial index's ``WHERE``; this one compares the whole
    statement (SQLite stores it without ``IF NOT EXISTS``)."""
    dialect = sqlite.dialect()
    with connect(path) as conn:
        stored = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'"))
    wrong: dict[str, tuple[str, str]] = {}
    for table in harel_sa.metadata(prefix).sorted_tables:
        for ix in table.indexes:
            if not on_dialect(ix, "sqlite"):
                continue
            want = str(CreateIndex(ix).compile(dialect=dialect))
            have = stored.get(ix.name) or ""
            if _normal(have) != _normal(want):
                wrong[str(ix.name)] = (have, want)
    return wrong


def assert_schema_is_metadata(path: Path | str, prefix: str = "harel") -> None:
    """The file's ``prefix`` tables are exactly ``harel_sa.metadata(prefix)``."""
    assert schema_diff(path, prefix) == []
    assert index_mismatches(path, prefix) == {}
    assert missing_objects(path, prefix) == set()


def missing_objects(path: Path | str, prefix: str = "harel") -> set[str]:
    """The metadata's tables and indexes that the file lacks (by name)."""
    md = harel_sa.metadata(prefix)
    wanted = {t.name for t in md.sorted_tables} | {
        str(ix.name) for t in md.sorted_tables for ix in t.indexes if on_dialect(ix, "sqlite")
    }
    return wanted - names_of(path, "table") - names_of(path, "index")


def drain(q: SqliteTransport[Any], worker: str = "w") -> list[tuple[str, str]]:
    """Claim and ack until nothing is deliverable now: the (group, kind) pairs, in order."""
    got: list[tuple[str, str]] = []
    while (lease := q.claim(worker, VIS)) is not None:
        got.append((lease.group_id, lease.event.kind))
        assert q.ack(lease)
    return got


def assert_delivered(got: list[tuple[str, str]], expected: list[tuple[str, str]]) -> None:
    """The same messages, and within each group in the same (FIFO) order."""
    assert sorted(got) == sorted(expected)
    for group in {g for g, _ in expected}:
        assert [k for g, k in got if g == group] == [k for g, k in expected if g == group]


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment for a child process, without ``PYTHONPATH``/``PYTHONHOME``: a
    separate virtual environment must not see the source tree."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(extra)
    return env


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | str = REPO,
    env: dict[str, str] | None = None,
    ok: bool = True,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run a real command; with ``ok`` (the default) fail the test, showing its output, unless
    it exits 0."""
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if ok:
        assert done.returncode == 0, (
            f"{argv} exited {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        )
    return done


def alembic(*args: str, cwd: Path | str = REPO, **kw: Any) -> subprocess.CompletedProcess[str]:
    """``alembic ARGS`` from ``cwd`` (the repository root by default), as a user types it."""
    return run([ALEMBIC, *args], cwd=cwd, **kw)

"""``harel_sa.migrations``'s Python API at its edges: what it accepts as a target, whose
engine and transaction it runs on, and that reading the version never takes the write lock.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from sqlalchemy import create_engine, text

from harel_sa import HEAD_REVISION
from harel_sa import migrations as mig
from tests.migrations.helpers import assert_schema_is_metadata, connect, version


def test_an_engine_target_is_used_for_its_url_and_gets_no_hooks(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'queue.db'}")
    hooks = (list(engine.dispatch.begin), list(engine.pool.dispatch.connect))
    try:
        mig.upgrade(engine)
        assert (list(engine.dispatch.begin), list(engine.pool.dispatch.connect)) == hooks
        assert mig.current(engine) == (HEAD_REVISION,) and mig.check(engine)
    finally:
        engine.dispose()
    assert_schema_is_metadata(tmp_path / "queue.db")


def test_an_aiosqlite_url_names_the_same_file(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    mig.upgrade(f"sqlite+aiosqlite:///{path}")
    assert version(path) == [HEAD_REVISION]


def test_a_connection_in_the_config_runs_in_the_callers_transaction(tmp_path: Path) -> None:
    """The Alembic cookbook's shared connection: the caller's transaction decides."""
    path = tmp_path / "queue.db"
    engine = mig.engine_for(f"sqlite:///{path}")
    try:
        with engine.connect() as conn:
            cfg = mig.config(path)
            cfg.attributes["connection"] = conn
            with conn.begin() as tx:
                command.upgrade(cfg, "heads")
                assert conn.execute(text("SELECT count(*) FROM sqlite_master")).scalar()
                tx.rollback()
        assert version(path) == []
        with engine.connect() as conn:
            cfg = mig.config(path)
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "heads")
            conn.commit()
    finally:
        engine.dispose()
    assert version(path) == [HEAD_REVISION]


def test_current_and_check_only_read(tmp_path: Path) -> None:
    """They work on a read-only connection, and while a writer holds the write lock (a read
    that began with BEGIN IMMEDIATE would wait for it, then fail)."""
    path = tmp_path / "queue.db"
    mig.upgrade(path)
    read_only = f"sqlite:///file:{path}?mode=ro&uri=true"
    assert mig.current(read_only) == (HEAD_REVISION,) and mig.check(read_only)
    with connect(path) as writer:
        writer.execute("PRAGMA journal_mode = WAL")
        writer.execute("BEGIN IMMEDIATE")
        assert mig.current(path) == (HEAD_REVISION,)
        writer.execute("ROLLBACK")


def test_nothing_recorded_reads_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    mig.upgrade(path, prefix="other")
    assert mig.current(path) == ()
    assert not mig.check(path)
    assert mig.heads() == (HEAD_REVISION,)

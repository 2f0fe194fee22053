"""Offline mode: ``alembic upgrade heads --sql`` prints the DDL a DBA reviews, touching no
database; the same text comes from ``harel_sa.migrations.sql()``. Applied by hand, that text
builds exactly the metadata and records head.
"""

from __future__ import annotations

import re
from pathlib import Path

from harel_sa import HEAD_REVISION, Names
from harel_sa import migrations as mig
from tests.migrations.helpers import alembic, assert_schema_is_metadata, connect, version

JOBS = Names("jobs")


def assert_reviewable(text: str, names: Names) -> None:
    assert text.lstrip().startswith("BEGIN;") and text.rstrip().endswith("COMMIT;")
    for table in names.tables:
        assert f"CREATE TABLE IF NOT EXISTS {table} (" in text
    assert f"ALTER TABLE {names.groups} ADD COLUMN routing_key TEXT" in text
    assert f"CREATE TABLE {names.version_table} (" in text
    assert f"INSERT INTO {names.version_table} (version_num) VALUES ('harel_sa_0001')" in text
    assert f"SET version_num='{HEAD_REVISION}'" in text
    assert text.count("-- Running upgrade") == 10  # harel_sa_0001 .. harel_sa_0010


def test_upgrade_heads_sql_prints_the_ddl_and_touches_nothing(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    done = alembic("-x", f"url=sqlite:///{path}", "-x", "prefix=jobs", "upgrade", "heads", "--sql")
    assert_reviewable(done.stdout, JOBS)
    assert "harel_transport" not in done.stdout
    assert not path.exists()


def test_no_url_is_needed_offline() -> None:
    done = alembic("upgrade", "heads", "--sql")
    assert_reviewable(done.stdout, Names())


def test_the_api_gives_the_same_text() -> None:
    api = mig.sql(prefix="jobs")
    assert_reviewable(api, JOBS)
    cli = alembic("-x", "prefix=jobs", "upgrade", "heads", "--sql").stdout
    assert api.strip() == cli.strip()


def test_the_printed_ddl_applied_by_hand_builds_the_schema_at_head(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    with connect(path) as conn:
        conn.executescript(mig.sql(prefix="jobs"))
    assert version(path, "jobs") == [HEAD_REVISION]
    assert mig.check(path, prefix="jobs")
    assert_schema_is_metadata(path, "jobs")


def test_a_range_prints_only_what_a_database_at_that_revision_needs(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    mig.upgrade(path, revision="harel_sa_0002")
    text = mig.sql(revision="harel_sa_0002:heads")
    assert re.findall(r"-- Running upgrade (\S+) -> (\S+)", text) == [
        ("harel_sa_0002", "harel_sa_0003"),
        ("harel_sa_0003", "harel_sa_0004"),
        ("harel_sa_0004", "harel_sa_0005"),
        ("harel_sa_0005", "harel_sa_0006"),
        ("harel_sa_0006", "harel_sa_0007"),
        ("harel_sa_0007", "harel_sa_0008"),
        ("harel_sa_0008", "harel_sa_0009"),
        ("harel_sa_0009", "harel_sa_0010"),
    ]
    assert "ADD COLUMN routing_key" not in text
    assert "CREATE TABLE IF NOT EXISTS harel_transport_messages" not in text
    with connect(path) as conn:
        conn.executescript(text)
    assert version(path) == [HEAD_REVISION]
    assert_schema_is_metadata(path)

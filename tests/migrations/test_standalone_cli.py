"""Standalone mode from the repository root: ``alembic -x url=... [-x prefix=...] COMMAND``.

Real ``alembic`` processes (the one installed next to the test's Python) on real files. Each
downgrade step keeps every row; the revision it undoes loses exactly its own objects.
"""

from __future__ import annotations

from pathlib import Path

from harel_sa import HEAD_REVISION, Names, SqliteTransport
from harel_sa import migrations as mig
from tests.conftest import FakeClock
from tests.migrations.helpers import (
    alembic,
    assert_schema_is_metadata,
    columns,
    names_of,
    rows,
    version,
)
from tests.migrations.starts import STARTS

NAMES = Names()
MESSAGE_COLS = ["seq", "group_id", "event", "locked_by", "lock_expiry"]
GROUP_COLS = ["group_id", "last_claimed_at", "priority"]

#: What each revision adds, by name; a downgrade past it must remove exactly these.
ADDED = {
    "harel_sa_0002": {"column:groups.routing_key", NAMES.groups_by_routing_key},
    "harel_sa_0003": {"column:messages.deliveries", NAMES.dead, NAMES.dead_by_group},
    "harel_sa_0004": {NAMES.groups_by_priority},
    "harel_sa_0005": {"column:messages.enqueued_at"},
    "harel_sa_0006": set(),  # PostgreSQL's indexes only
    "harel_sa_0007": {
        "column:messages.message_key",
        NAMES.messages_by_key,
        NAMES.scheduled,
        NAMES.scheduled_by_due,
        NAMES.scheduled_by_key,
    },
    "harel_sa_0008": {NAMES.periodic},
    "harel_sa_0009": {NAMES.controls},
    "harel_sa_0010": {
        "column:groups.max_in_flight",
        "column:scheduled.max_in_flight",
        "column:dead.max_in_flight",
    },
}


def objects(path: Path) -> set[str]:
    """harel_sa's tables, indexes and the columns revisions add, as named in ``ADDED``."""
    found = (names_of(path, "table") | names_of(path, "index")) & {
        *NAMES.tables,
        NAMES.groups_by_last_claimed,
        NAMES.messages_by_group,
        *(n for added in ADDED.values() for n in added),
    }
    if "routing_key" in columns(path, NAMES.groups):
        found.add("column:groups.routing_key")
    if "deliveries" in columns(path, NAMES.messages):
        found.add("column:messages.deliveries")
    if "enqueued_at" in columns(path, NAMES.messages):
        found.add("column:messages.enqueued_at")
    if "message_key" in columns(path, NAMES.messages):
        found.add("column:messages.message_key")
    for table in ("groups", "scheduled", "dead"):
        if "max_in_flight" in columns(path, getattr(NAMES, table)):
            found.add(f"column:{table}.max_in_flight")
    return found


def kept(path: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    return rows(path, NAMES.messages, MESSAGE_COLS), rows(path, NAMES.groups, GROUP_COLS)


def url(path: Path) -> str:
    return f"url=sqlite:///{path}"


def test_upgrade_head_from_the_repo_root_on_an_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    done = alembic("-x", url(path), "upgrade", "head")
    assert "Running upgrade harel_sa_0009 -> harel_sa_0010" in done.stderr
    assert version(path) == [HEAD_REVISION]
    assert_schema_is_metadata(path)
    assert alembic("-x", url(path), "current").stdout.split() == [HEAD_REVISION, "(head)"]


def test_x_prefix_names_the_tables_and_their_own_version_table(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    alembic("-x", url(path), "-x", "prefix=jobs", "upgrade", "head")
    jobs = Names("jobs")
    assert names_of(path, "table") >= {*jobs.tables, jobs.version_table}
    assert not names_of(path, "table") & {*NAMES.tables, NAMES.version_table, "alembic_version"}
    assert version(path, "jobs") == [HEAD_REVISION]
    assert_schema_is_metadata(path, "jobs")
    assert mig.current(path, prefix="jobs") == (HEAD_REVISION,)
    assert mig.current(path) == ()  # the default prefix has nothing recorded


def test_downgrade_minus_one_from_head_undoes_only_the_last_revision(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    STARTS["stdlib4-orphans"](path, FakeClock())
    alembic("-x", url(path), "upgrade", "head")
    before, objs = kept(path), objects(path)
    alembic("-x", url(path), "downgrade", "-1")
    assert version(path) == ["harel_sa_0009"]
    assert objects(path) == objs - ADDED["harel_sa_0010"]
    assert kept(path) == before


def test_each_downgrade_step_keeps_every_row_then_upgrade_restores_head(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "queue.db"
    STARTS["stdlib4-orphans"](path, clock)
    alembic("-x", url(path), "upgrade", "head")
    messages, groups = kept(path)
    keys = rows(path, NAMES.groups, ["group_id", "routing_key"])
    objs = objects(path)
    for undone, now_at in (
        ("harel_sa_0010", "harel_sa_0009"),
        ("harel_sa_0009", "harel_sa_0008"),
        ("harel_sa_0008", "harel_sa_0007"),
        ("harel_sa_0007", "harel_sa_0006"),
        ("harel_sa_0006", "harel_sa_0005"),
        ("harel_sa_0005", "harel_sa_0004"),
        ("harel_sa_0004", "harel_sa_0003"),
        ("harel_sa_0003", "harel_sa_0002"),
        ("harel_sa_0002", "harel_sa_0001"),
    ):
        # below harel_sa_0002 the groups' routing keys go: that step needs the force switch
        alembic("-x", url(path), "-x", "force=1", "downgrade", "-1")
        assert version(path) == [now_at]
        objs -= ADDED[undone]
        assert objects(path) == objs, undone
        assert kept(path) == (messages, groups), undone
        if now_at != "harel_sa_0001":
            assert rows(path, NAMES.groups, ["group_id", "routing_key"]) == keys
    assert "routing_key" not in columns(path, NAMES.groups)

    alembic("-x", url(path), "upgrade", "heads")
    assert version(path) == [HEAD_REVISION]
    assert kept(path) == (messages, groups)
    assert_schema_is_metadata(path)
    with SqliteTransport(path, create_schema=False, clock=clock) as q:
        assert q.claim("w", 30.0) is not None


def test_downgrade_to_the_base_revision_removes_routing_key_and_keeps_rows(
    tmp_path: Path,
) -> None:
    path = tmp_path / "queue.db"
    STARTS["stdlib4"](path, FakeClock())
    alembic("-x", url(path), "upgrade", "head")
    before = kept(path)
    alembic("-x", url(path), "-x", "force=1", "downgrade", "harel_sa_0001")
    assert version(path) == ["harel_sa_0001"]
    assert "routing_key" not in columns(path, NAMES.groups)
    assert NAMES.groups_by_routing_key not in names_of(path, "index")
    assert kept(path) == before


def test_downgrade_base_removes_the_prefix_and_nothing_else(tmp_path: Path) -> None:
    """Below the root revision there is no queue: its tables go, with their rows."""
    path = tmp_path / "queue.db"
    alembic("-x", url(path), "upgrade", "head")
    alembic("-x", url(path), "-x", "prefix=other", "upgrade", "head")
    alembic("-x", url(path), "downgrade", "base")
    assert version(path) == []
    assert not names_of(path, "table") & set(NAMES.tables)
    assert version(path, "other") == [HEAD_REVISION]
    assert_schema_is_metadata(path, "other")


def test_without_a_url_the_command_says_what_to_pass(tmp_path: Path) -> None:
    done = alembic("upgrade", "heads", ok=False)
    assert done.returncode != 0
    assert "-x url=sqlite:///PATH" in done.stderr

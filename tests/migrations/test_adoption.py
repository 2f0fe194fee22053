"""Adoption: ``upgrade`` brings every kind of existing file to head, with no manual ``stamp``.

Starting points (``starts.py``): an empty file; the original stdlib transport's schema 3 and
schema 4, each with rows free, leased and parked; the same with orphaned messages (no group
row); a file made by ``SqliteTransport(create_schema=True)``. Each is upgraded through the
Python API and through the ``alembic`` command, and afterwards:

- every row is still there, column for column (orphans gained exactly their group row);
- the version table says head, and Alembic's ``compare_metadata`` finds no difference from
  ``harel_sa.metadata()`` (types and server defaults included);
- a transport that creates nothing (``create_schema=False``) opens it, delivers the free
  messages and the adopted orphans at once, and the leased and parked ones only after their
  lease or park ends, each group in FIFO order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harel_sa import HEAD_REVISION, Event, Names, SqliteTransport
from harel_sa import migrations as mig
from tests.conftest import FakeClock
from tests.migrations.helpers import (
    alembic,
    assert_delivered,
    assert_rows_kept,
    assert_schema_is_metadata,
    columns,
    drain,
    rows,
    snapshot,
    sqlite_master,
    version,
)
from tests.migrations.starts import HOLD, STARTS

NAMES = Names()


def upgrade(how: str, path: Path) -> None:
    if how == "api":
        mig.upgrade(path)
    else:
        alembic("-x", f"url=sqlite:///{path}", "upgrade", "head")


@pytest.mark.parametrize("how", ["api", "cli"])
@pytest.mark.parametrize("start", list(STARTS))
def test_upgrade_adopts_the_file_and_keeps_every_row(
    start: str, how: str, tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "queue.db"
    expected = STARTS[start](path, clock)
    before = snapshot(path)
    # nobody stamped it; a transport's start-up records the revision it reached
    assert version(path) == ([HEAD_REVISION] if start == "create_schema" else [])

    upgrade(how, path)

    assert version(path) == [HEAD_REVISION]
    assert mig.current(path) == (HEAD_REVISION,) and mig.check(path)
    assert_rows_kept(path, before, adopted=expected.adopted)
    if start.startswith("stdlib"):
        assert {r[0] for r in rows(path, NAMES.messages, ["deliveries"])} == {0}
    assert_schema_is_metadata(path)

    with SqliteTransport(path, create_schema=False, clock=clock) as q:
        assert_delivered(drain(q), expected.now)
        clock.advance(HOLD + 1)
        assert_delivered(drain(q), expected.later)
        q.publish("after", Event(kind="after-1"), priority=3, routing_key="edge")
        lease = q.claim("w", 30.0, min_priority=3, routing_keys=["edge"])
        assert lease is not None and lease.event.kind == "after-1"


@pytest.mark.parametrize("start", ["stdlib3-orphans", "create_schema"])
def test_a_second_upgrade_changes_nothing(start: str, tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "queue.db"
    STARTS[start](path, clock)
    mig.upgrade(path)
    schema, data = sqlite_master(path), snapshot(path)
    mig.upgrade(path)
    alembic("-x", f"url=sqlite:///{path}", "upgrade", "heads")
    assert sqlite_master(path) == schema
    assert snapshot(path) == data
    assert version(path) == [HEAD_REVISION]


def test_the_orphans_group_rows_are_what_the_original_publish_would_have_written(
    tmp_path: Path, clock: FakeClock
) -> None:
    """An adopted group is a plain new group: never claimed, priority 0, no routing key."""
    path = tmp_path / "queue.db"
    STARTS["stdlib3-orphans"](path, clock)
    mig.upgrade(path, revision="harel_sa_0001")  # the base revision alone adopts them
    got = rows(path, NAMES.groups, ["group_id", "last_claimed_at", "priority"])
    assert ("lost", 0.0, 0) in got and ("lost-leased", 0.0, 0) in got
    assert "routing_key" not in columns(path, NAMES.groups)  # schema 3 until harel_sa_0002
    mig.upgrade(path)
    assert ("lost", None) in rows(path, NAMES.groups, ["group_id", "routing_key"])

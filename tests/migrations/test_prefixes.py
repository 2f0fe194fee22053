"""Several prefixes in one file, each with its own version table, moved independently; and
where a revision learns its prefix (Config attribute, ``-x prefix=``, ini option, default).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harel_sa import HEAD_REVISION, Event, Names, SqliteTransport
from harel_sa import migrations as mig
from harel_sa.errors import InvalidArgumentError
from tests.conftest import FakeClock
from tests.migrations.helpers import (
    REPO,
    alembic,
    assert_schema_is_metadata,
    columns,
    names_of,
    snapshot,
    version,
)

A, B = Names("a"), Names("b")


def test_two_prefixes_upgrade_and_downgrade_independently(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "queue.db"
    mig.upgrade(path, prefix="a")
    mig.upgrade(path, prefix="b", revision="harel_sa_0002")
    assert (version(path, "a"), version(path, "b")) == ([HEAD_REVISION], ["harel_sa_0002"])
    assert (mig.check(path, prefix="a"), mig.check(path, prefix="b")) == (True, False)
    assert "deliveries" not in columns(path, B.messages) and B.dead not in names_of(path, "table")
    assert_schema_is_metadata(path, "a")

    with SqliteTransport(path, prefix="a", create_schema=False, clock=clock) as q:
        q.publish("g", Event(kind="a-1"))
    a_rows = snapshot(path, "a")

    mig.upgrade(path, prefix="b")
    mig.downgrade(path, "harel_sa_0001", prefix="a", force=True)
    assert (version(path, "a"), version(path, "b")) == (["harel_sa_0001"], [HEAD_REVISION])
    assert "routing_key" not in columns(path, A.groups)
    assert "routing_key" in columns(path, B.groups)
    assert_schema_is_metadata(path, "b")
    assert snapshot(path, "a")[A.messages][1] == [r[:5] for r in a_rows[A.messages][1]]

    with SqliteTransport(path, prefix="b", create_schema=False, clock=clock) as q:
        q.publish("g", Event(kind="b-1"))
        lease = q.claim("w", 30.0)
        assert lease is not None and lease.event.kind == "b-1"  # b sees only its own rows

    mig.downgrade(path, "base", prefix="b", force=True)
    assert not names_of(path, "table") & set(B.tables)
    assert version(path, "b") == [] and version(path, "a") == ["harel_sa_0001"]
    mig.upgrade(path, prefix="a")
    assert_schema_is_metadata(path, "a")
    with SqliteTransport(path, prefix="a", create_schema=False, clock=clock) as q:
        lease = q.claim("w", 30.0)
        assert lease is not None and lease.event.kind == "a-1"  # a's row survived it all


def test_the_prefix_comes_from_the_config_attribute_first(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    cfg = mig.config(path, prefix="viaattr")
    cfg.set_main_option("harel_sa_prefix", "viaini")
    from alembic import command

    command.upgrade(cfg, "heads")
    assert version(path, "viaattr") == [HEAD_REVISION]
    assert version(path, "viaini") == []


def test_the_prefix_comes_from_an_ini_option(tmp_path: Path) -> None:
    """An ini of the user's own: ``harel_sa_prefix = NAME`` under ``[alembic]``."""
    path = tmp_path / "queue.db"
    ini = tmp_path / "queue.ini"
    ini.write_text(
        "[alembic]\n"
        f"script_location = {REPO / 'migrations'}\n"
        "path_separator = space\n"
        "harel_sa_prefix = viaini\n"
        f"sqlalchemy.url = sqlite:///{path}\n"
    )
    alembic("-c", str(ini), "upgrade", "heads", cwd=tmp_path)
    assert version(path, "viaini") == [HEAD_REVISION]
    alembic("-c", str(ini), "-x", "prefix=viax", "upgrade", "heads", cwd=tmp_path)
    assert version(path, "viax") == [HEAD_REVISION]  # -x wins over the ini option
    assert version(path) == []


def test_the_repo_ini_defaults_to_harel(tmp_path: Path) -> None:
    path = tmp_path / "queue.db"
    alembic("-x", f"url=sqlite:///{path}", "upgrade", "heads")
    assert version(path, "harel") == [HEAD_REVISION]


@pytest.mark.parametrize("bad", ["1abc", "a-b", "x" * 31, "", "a;drop"])
def test_a_bad_prefix_is_refused_before_the_file_is_touched(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "queue.db"
    with pytest.raises(InvalidArgumentError):
        mig.upgrade(path, prefix=bad)
    assert not path.exists()
    done = alembic(
        "-x", f"url=sqlite:///{path}", "-x", f"prefix={bad}", "upgrade", "heads", ok=False
    )
    assert done.returncode != 0 and "prefix" in done.stderr
    assert not path.exists() or path.stat().st_size == 0

"""Integrated mode: a throw-away host project (its own ``alembic.ini``, ``env.py``, models and a
revision that ``depends_on`` harel_sa_0002, all copied from docs/alembic.md) runs harel_sa's
revisions in its own history with real ``alembic`` processes, from its own folder.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from harel_sa import HEAD_REVISION, Names, SqliteTransport
from tests.conftest import FakeClock
from tests.migrations.helpers import (
    REPO,
    assert_delivered,
    assert_rows_kept,
    assert_schema_is_metadata,
    drain,
    names_of,
    snapshot,
    sqlite_master,
    version,
)
from tests.migrations.host import (
    assert_check_needs_the_filter,
    assert_day_to_day_commands,
    assert_upgrade_heads,
    make_host,
)
from tests.migrations.starts import STARTS

BOOM = textwrap.dedent(
    '''
    """A host revision that fails half-way."""

    import sqlalchemy as sa
    from alembic import op

    revision = "app_0002"
    down_revision = "app_0001"
    branch_labels = None
    depends_on = None


    def upgrade() -> None:
        op.create_table("half_made", sa.Column("id", sa.Integer, primary_key=True))
        raise RuntimeError("boom half-way")


    def downgrade() -> None:
        op.drop_table("half_made")
    '''
)


def test_upgrade_heads_builds_both_histories_and_the_transport_runs_on_it(
    tmp_path: Path,
) -> None:
    host = make_host(tmp_path / "host")
    info = assert_upgrade_heads(host)
    assert info["head"] == HEAD_REVISION
    assert Path(info["package"]).resolve().is_relative_to(REPO)  # the editable install
    assert_check_needs_the_filter(host)
    assert_day_to_day_commands(host)


def test_a_host_choosing_another_prefix(tmp_path: Path) -> None:
    host = make_host(tmp_path / "host", prefix="jobs", env="prefix")
    assert_upgrade_heads(host)
    assert not names_of(host.db, "table") & set(Names().tables)
    assert_check_needs_the_filter(host)


def test_a_host_adopts_a_file_of_the_original_transport(tmp_path: Path, clock: FakeClock) -> None:
    host = make_host(tmp_path / "host")
    expected = STARTS["stdlib3-orphans"](host.db, clock)
    before = snapshot(host.db)
    host.alembic("upgrade", "heads")
    assert version(host.db, table="alembic_version") == ["app_0001", HEAD_REVISION]
    assert_rows_kept(host.db, before, adopted=expected.adopted)
    assert_schema_is_metadata(host.db)
    with SqliteTransport(host.db, create_schema=False, clock=clock) as q:
        assert_delivered(drain(q), expected.now)


def test_a_failing_revision_with_the_transactional_recipe_leaves_nothing(tmp_path: Path) -> None:
    """With harel_sa's engine in the host's env.py the whole ``upgrade heads`` is one
    transaction: harel_sa's four revisions and app_0001 are rolled back with app_0002."""
    host = make_host(tmp_path / "host", env="transactional")
    (host.versions / "app_0002_boom.py").write_text(BOOM)
    done = host.alembic("upgrade", "heads", ok=False)
    assert done.returncode != 0 and "boom half-way" in done.stderr
    assert sqlite_master(host.db) == []
    (host.versions / "app_0002_boom.py").unlink()
    assert_upgrade_heads(host)


def test_a_failing_revision_with_the_plain_recipe_leaves_its_first_statements(
    tmp_path: Path,
) -> None:
    """What the docs warn about: SQLite's driver commits DDL as it goes. The revisions before
    the failing one stay applied and recorded; the failing one's table stays, unrecorded."""
    host = make_host(tmp_path / "host")
    (host.versions / "app_0002_boom.py").write_text(BOOM)
    done = host.alembic("upgrade", "heads", ok=False)
    assert done.returncode != 0 and "boom half-way" in done.stderr
    assert "half_made" in names_of(host.db, "table")
    assert version(host.db, table="alembic_version") == ["app_0001", HEAD_REVISION]


def test_what_not_to_do(tmp_path: Path) -> None:
    host = make_host(tmp_path / "host")

    done = host.alembic("upgrade", "head", ok=False)  # singular, with two bases
    assert done.returncode != 0 and "Multiple head revisions" in done.stderr
    assert names_of(host.db, "table") <= {"alembic_version"}  # nothing was applied

    # Adding the line beside alembic init's own, instead of changing it:
    host.set_ini("path_separator = space", "path_separator = os\npath_separator = space")
    done = host.alembic("heads", ok=False)
    assert done.returncode != 0 and "DuplicateOptionError" in done.stderr

    # Keeping alembic init's value: the colon splits the list, both halves name no directory,
    # and the history is empty: nothing to show, nothing applied, and exit 0.
    host.set_ini("path_separator = os\npath_separator = space", "path_separator = os")
    assert host.alembic("heads").stdout == ""
    host.alembic("upgrade", "heads")
    assert names_of(host.db, "table") <= {"alembic_version"}
    assert version(host.db, table="alembic_version") == []

    host.set_ini("path_separator = os\n", "")  # Alembic's deprecated legacy splitting works
    done = host.alembic("heads")
    assert f"{HEAD_REVISION} (harel_sa) (head)" in done.stdout

"""The shape of harel_sa's history: one root with the ``harel_sa`` branch label, one head
equal to ``harel_sa.HEAD_REVISION``, short stable ids, frozen DDL, shipped inside the package.
"""

from __future__ import annotations

from pathlib import Path

from alembic.script import ScriptDirectory
from alembic.util import coerce_resource_to_filename

import harel_sa
from harel_sa import migrations as mig
from tests.migrations.helpers import REPO

SCRIPT = ScriptDirectory(mig.script_location())
VERSIONS = Path(mig.version_location())


def test_head_revision_is_the_head_of_the_script_directory() -> None:
    assert mig.heads() == (harel_sa.HEAD_REVISION,)
    assert SCRIPT.get_current_head() == harel_sa.HEAD_REVISION


def test_every_revision_id_fits_alembic_version_varchar_32() -> None:
    ids = [rev.revision for rev in SCRIPT.walk_revisions()]
    assert ids == [
        "harel_sa_0010",
        "harel_sa_0009",
        "harel_sa_0008",
        "harel_sa_0007",
        "harel_sa_0006",
        "harel_sa_0005",
        "harel_sa_0004",
        "harel_sa_0003",
        "harel_sa_0002",
        "harel_sa_0001",
    ]
    assert all(len(i) <= 32 for i in ids)


def test_one_root_carrying_the_branch_label() -> None:
    bases = SCRIPT.get_bases()
    assert bases == ["harel_sa_0001"]
    assert SCRIPT.get_revision("harel_sa_0001").branch_labels == {mig.BRANCH}
    assert SCRIPT.get_revision("harel_sa@head").revision == harel_sa.HEAD_REVISION
    assert all(rev.dependencies is None for rev in SCRIPT.walk_revisions())


def test_the_revisions_ship_inside_the_package() -> None:
    """``harel_sa.migrations`` is the top-level migrations/ folder (packaging maps it there,
    no symlink); the resource a host names in ``version_locations`` resolves to it."""
    assert Path(mig.__file__).resolve().parent == REPO / "migrations"  # the editable install
    assert Path(mig.script_location()) == REPO / "migrations"
    assert not (Path(harel_sa.__file__).parent / "migrations").exists()
    assert VERSIONS.is_dir()
    resource = coerce_resource_to_filename(mig.VERSION_LOCATION)
    assert resource.resolve() == VERSIONS.resolve()
    assert {p.name for p in VERSIONS.glob("harel_sa_*.py")} == {
        "harel_sa_0001_base.py",
        "harel_sa_0002_routing_key.py",
        "harel_sa_0003_dead_letters.py",
        "harel_sa_0004_priority_index.py",
        "harel_sa_0005_enqueued_at.py",
        "harel_sa_0006_flat_lanes.py",
        "harel_sa_0007_scheduled_and_keys.py",
        "harel_sa_0008_periodic.py",
        "harel_sa_0009_controls.py",
        "harel_sa_0010_group_concurrency.py",
    }


def test_harel_sa_migrations_exports_only_what_users_call() -> None:
    assert set(mig.__all__) == {
        "BRANCH",
        "VERSION_LOCATION",
        "check",
        "config",
        "current",
        "downgrade",
        "engine_for",
        "heads",
        "include_name",
        "include_name_for",
        "prefix_of",
        "script_location",
        "sql",
        "stamp",
        "upgrade",
        "version_location",
    }
    public = {n for n in vars(mig) if not n.startswith("_")}
    assert public - set(mig.__all__) <= {"annotations"}

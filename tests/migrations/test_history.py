"""The shape of harel_sa's history: one root with the ``harel_sa`` branch label, one head
equal to ``harel_sa.HEAD_REVISION``, short stable ids, frozen DDL, shipped inside the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

from alembic.script import ScriptDirectory
from alembic.util import coerce_resource_to_filename

import harel_sa
from harel_sa import migrations as mig

SCRIPT = ScriptDirectory(mig.script_location())
VERSIONS = Path(mig.version_location())


def test_head_revision_is_the_head_of_the_script_directory() -> None:
    assert mig.heads() == (harel_sa.HEAD_REVISION,)
    assert SCRIPT.get_current_head() == harel_sa.HEAD_REVISION


def test_every_revision_id_fits_alembic_version_varchar_32() -> None:
    ids = [rev.revision for rev in SCRIPT.walk_revisions()]
    assert ids == ["harel_sa_0004", "harel_sa_0003", "harel_sa_0002", "harel_sa_0001"]
    assert all(len(i) <= 32 for i in ids)


def test_one_root_carrying_the_branch_label() -> None:
    bases = SCRIPT.get_bases()
    assert bases == ["harel_sa_0001"]
    assert SCRIPT.get_revision("harel_sa_0001").branch_labels == {mig.BRANCH}
    assert SCRIPT.get_revision("harel_sa@head").revision == harel_sa.HEAD_REVISION
    assert all(rev.dependencies is None for rev in SCRIPT.walk_revisions())


def test_the_revisions_ship_inside_the_package() -> None:
    package = Path(harel_sa.__file__).parent
    assert VERSIONS.is_dir()
    assert Path(mig.script_location()) == Path(mig.__file__).resolve().parent
    assert (package / "migrations" / "versions").resolve() == VERSIONS.resolve()
    resource = coerce_resource_to_filename(mig.VERSION_LOCATION)
    assert resource.resolve() == VERSIONS.resolve()
    assert {p.name for p in VERSIONS.glob("harel_sa_*.py")} == {
        "harel_sa_0001_base.py",
        "harel_sa_0002_routing_key.py",
        "harel_sa_0003_dead_letters.py",
        "harel_sa_0004_priority_index.py",
    }


def test_revisions_spell_their_ddl_and_never_use_the_live_metadata() -> None:
    """A released revision must mean the same forever: it may use the frozen steps and the
    names, never ``harel_sa.schema``'s tables (which move with the next release)."""
    for path in VERSIONS.glob("*.py"):
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
            "collections.abc.Sequence",
            "sqlalchemy",
            "alembic.op",
            "harel_sa.steps",
            "harel_sa.migrations.OpRunner",
            "harel_sa.migrations.revision_names",
        }, path.name

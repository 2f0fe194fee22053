"""The same host flow with harel_sa installed from a built wheel into a fresh virtual
environment: nothing comes from the source tree, and the revisions are found in the package.

The wheel is built from a copy of the working tree (so no ``build/`` directory is left in, or
reused from, the repository); its dependencies come from the package index.
"""

from __future__ import annotations

import shutil
import sys
import zipfile
from pathlib import Path

import pytest

from harel_sa import HEAD_REVISION
from tests.migrations.helpers import REPO, clean_env, run, version
from tests.migrations.host import (
    Tools,
    assert_check_needs_the_filter,
    assert_upgrade_heads,
    make_host,
    recipe,
)

COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "*.db*"
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=COPY_IGNORE)
    dist = root / "dist"
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", dist, src],
        cwd=root,
        env=clean_env(),
        timeout=300,
    )
    (built,) = dist.glob("harel_sa-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Tools:
    """A fresh virtual environment with the wheel (and its dependencies) installed."""
    venv = tmp_path_factory.mktemp("venv") / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=venv.parent, env=clean_env())
    python = venv / "bin" / "python"
    run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel],
        cwd=venv.parent,
        env=clean_env(),
        timeout=300,
    )
    return Tools(python, venv / "bin" / "alembic", clean_env())


def test_the_wheel_carries_the_environment_and_the_revisions(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {
        "harel_sa/py.typed",
        "harel_sa/migrations/__init__.py",
        "harel_sa/migrations/env.py",
        "harel_sa/migrations/script.py.mako",
        "harel_sa/migrations/versions/harel_sa_0001_base.py",
        "harel_sa/migrations/versions/harel_sa_0002_routing_key.py",
        "harel_sa/migrations/versions/harel_sa_0003_dead_letters.py",
        "harel_sa/migrations/versions/harel_sa_0004_priority_index.py",
    } <= names
    assert not any(n.startswith(("migrations/", "tests/")) for n in names)


def test_a_host_project_runs_the_installed_revisions(tmp_path: Path, installed: Tools) -> None:
    host = make_host(tmp_path / "host", installed)
    info = assert_upgrade_heads(host)
    venv = installed.python.parent.parent
    for where in (info["package"], info["version_location"]):
        assert Path(where).resolve().is_relative_to(venv), where
        assert not Path(where).resolve().is_relative_to(REPO), where
    assert info["head"] == HEAD_REVISION
    assert_check_needs_the_filter(host)


def test_standalone_from_the_installed_package(tmp_path: Path, installed: Tools) -> None:
    """The two-line ini of the docs and the Python API, with no repository around."""
    (tmp_path / "harel_sa.ini").write_text(recipe("standalone-ini"))
    db = tmp_path / "queue.db"
    run(
        [
            installed.alembic,
            "-c",
            "harel_sa.ini",
            "-x",
            f"url=sqlite:///{db}",
            "-x",
            "prefix=jobs",
            "upgrade",
            "heads",
        ],
        cwd=tmp_path,
        env=installed.env,
    )
    assert version(db, "jobs") == [HEAD_REVISION]
    run([installed.python, "-c", recipe("api")], cwd=tmp_path, env=installed.env)
    assert version(db) == [HEAD_REVISION]

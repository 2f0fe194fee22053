"""Packaging without a symlink: the wheel and the sdist are built from a clone made with
``core.symlinks=false`` (Windows' default), hold every revision, and the installed wheel runs
``harel-sa`` and the host flow from a fresh virtual environment, nothing from the source tree.

The clone is of the committed repository (what CI and users get); its dependencies come from
the package index.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import urllib.request
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

REVISIONS = sorted(p.name for p in (REPO / "migrations" / "versions").glob("harel_sa_*.py"))


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(wheel, sdist) built by ``python -m build`` (the sdist first, the wheel from it)."""
    root = tmp_path_factory.mktemp("dist")
    src = root / "clone"
    run(["git", "clone", "-q", "-c", "core.symlinks=false", REPO, src], cwd=root, env=clean_env())
    tracked = run(["git", "ls-files", "-s"], cwd=src).stdout.splitlines()
    assert not [ln for ln in tracked if ln.startswith("120000")], "a symlink is tracked"
    assert not [p for p in src.rglob("*") if p.is_symlink()]
    out = root / "out"
    built = run(
        [sys.executable, "-m", "build", "--outdir", out, src],
        cwd=root,
        env=clean_env(),
        timeout=600,
    )
    # No warning of the project's own (the web view's templates once shipped by accident of
    # setuptools' discovery, which warned it would stop); the build's own notes aside.
    said = [
        line
        for line in (built.stdout + built.stderr).splitlines()
        if "warning" in line.lower() and "byte-compiling is disabled" not in line
    ]
    assert not said, said
    (wheel,) = out.glob("harel_sa-*.whl")
    (sdist,) = out.glob("harel_sa-*.tar.gz")
    return wheel, sdist


@pytest.fixture(scope="module")
def installed(dist: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Tools:
    """A fresh virtual environment with the wheel (and its dependencies) installed."""
    venv = tmp_path_factory.mktemp("venv") / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=venv.parent, env=clean_env())
    python = venv / "bin" / "python"
    run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", dist[0]],
        cwd=venv.parent,
        env=clean_env(),
        timeout=300,
    )
    return Tools(python, venv / "bin" / "alembic", clean_env())


def test_the_wheel_carries_the_environment_and_every_revision(dist: tuple[Path, Path]) -> None:
    names = set(zipfile.ZipFile(dist[0]).namelist())
    assert {
        "harel_sa/py.typed",
        "harel_sa/postgres/transport.py",  # the postgres extra's code ships in every wheel
        "harel_sa/migrations/__init__.py",
        "harel_sa/migrations/env.py",
        "harel_sa/migrations/script.py.mako",
        "harel_sa/web/app.py",  # the web extra's code and its pages
        "harel_sa/web/templates/page.html",
        "harel_sa/web/templates/style.css",
        *(f"harel_sa/migrations/versions/{name}" for name in REVISIONS),
    } <= names
    assert len(REVISIONS) == 10
    assert not any(n.startswith(("migrations/", "tests/")) for n in names)


def test_the_sdist_carries_every_revision(dist: tuple[Path, Path]) -> None:
    with tarfile.open(dist[1]) as sdist:
        members = {m.name.split("/", 1)[1]: m for m in sdist.getmembers() if "/" in m.name}
    for name in ("migrations/__init__.py", "migrations/env.py", "migrations/script.py.mako"):
        assert members[name].isfile(), name
    for name in REVISIONS:
        assert members[f"migrations/versions/{name}"].isfile(), name
    assert not any(m.issym() for m in members.values())


def test_the_installed_command_runs_and_upgrades(tmp_path: Path, installed: Tools) -> None:
    harel_sa = installed.python.parent / "harel-sa"
    done = run([harel_sa, "--help"], cwd=tmp_path, env=installed.env)
    assert "db" in done.stdout and "demo" in done.stdout
    done = run([harel_sa, "db", "upgrade", "--db", "q.db"], cwd=tmp_path, env=installed.env)
    assert done.stdout.strip() == f"q.db (prefix harel): upgraded (none) -> {HEAD_REVISION}"
    assert version(tmp_path / "q.db") == [HEAD_REVISION]
    where = run(
        [installed.python, "-c", "import harel_sa.migrations as m; print(m.version_location())"],
        cwd=tmp_path,
        env=installed.env,
    ).stdout.strip()
    assert Path(where).is_relative_to(installed.python.parent.parent)
    assert sorted(p.name for p in Path(where).glob("harel_sa_*.py")) == REVISIONS


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


def test_a_base_install_imports_everything_and_names_the_missing_extras(
    tmp_path: Path, installed: Tools
) -> None:
    """No extra installed: a star import works; a PostgreSQL transport, a --url postgresql://
    and --metrics-port each say which extra to install (exit 2), never a bare import error."""
    star = (
        "from harel_sa import *\n"
        "q = SqliteTransport('q.db')\n"
        "q.publish('g', Event(kind='x'))\n"
        "assert q.claim('w', 30.0) is not None\n"
        "try:\n"
        "    PostgresTransport('postgresql://app@localhost/db')\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc)\n"
    )
    said = run([installed.python, "-c", star], cwd=tmp_path, env=installed.env).stdout
    assert "pip install 'harel-sa[postgres]'" in said
    (tmp_path / "app.py").write_text("def handle(event):\n    pass\n")
    harel_sa = installed.python.parent / "harel-sa"
    url = ["--url", "postgresql://app@localhost/db"]
    for argv, extra in (
        (["worker", "app:handle", *url], "postgres"),
        (["demo", *url], "postgres"),
        (["db", "check", *url], "postgres"),
        (["worker", "app:handle", "--db", "q.db", "--metrics-port", "0"], "metrics"),
        (["web", "--db", "q.db"], "web"),
    ):
        done = run([harel_sa, *argv], cwd=tmp_path, env=installed.env, ok=False)
        assert done.returncode == 2, done.stderr
        assert f"pip install 'harel-sa[{extra}]'" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and "unexpected" not in done.stderr


def test_the_installed_web_view_serves_its_page(
    dist: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The wheel with its ``[web]`` extra, in a fresh environment: ``harel-sa web`` serves the
    page from the templates the wheel carries."""
    venv = tmp_path_factory.mktemp("webvenv") / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=venv.parent, env=clean_env())
    python = venv / "bin" / "python"
    run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{dist[0]}[web]"],
        cwd=venv.parent,
        env=clean_env(),
        timeout=300,
    )
    where = venv.parent
    run([venv / "bin" / "harel-sa", "db", "upgrade", "--db", "q.db"], cwd=where, env=clean_env())
    server = subprocess.Popen(
        [venv / "bin" / "harel-sa", "web", "--db", "q.db", "--port", "0"],
        cwd=where,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        first = server.stdout.readline()  # "harel-sa web: q.db on http://127.0.0.1:PORT/ (...)"
        url = first.split(" on ", 1)[1].split(" ", 1)[0]
        with urllib.request.urlopen(url, timeout=60) as page:
            html = page.read().decode()
        assert page.status == 200 and "<html" in html and "q.db" in html, html[:500]
    finally:
        server.terminate()
        server.wait(60)

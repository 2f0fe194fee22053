"""docs/alembic.md's standalone recipes, run as written (the integrated ones run in
``test_host_project.py``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from harel_sa import HEAD_REVISION
from tests.migrations.helpers import alembic, run, version
from tests.migrations.host import DOC, recipe


def test_the_python_api_recipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(recipe("api"), str(DOC), "exec"), {})
    db = tmp_path / "queue.db"
    assert version(db) == [HEAD_REVISION]
    assert version(db, "jobs") == ["harel_sa_0009"]  # head, then -1


def test_the_standalone_ini_recipe(tmp_path: Path) -> None:
    (tmp_path / "harel_sa.ini").write_text(recipe("standalone-ini"))
    db = tmp_path / "queue.db"
    alembic(
        "-c",
        "harel_sa.ini",
        "-x",
        f"url=sqlite:///{db}",
        "-x",
        "prefix=jobs",
        "upgrade",
        "heads",
        cwd=tmp_path,
    )
    assert version(db, "jobs") == [HEAD_REVISION]


def test_the_repository_commands_of_the_docs(tmp_path: Path) -> None:
    """The ``alembic ...`` lines under "From this repository", run in order from the root."""
    block = DOC.read_text().split("### From this repository", 1)[1].split("```sh\n", 1)[1]
    lines = [re.sub(r"\s+#.*$", "", ln).split() for ln in block.split("```", 1)[0].splitlines()]
    db = tmp_path / "queue.db"
    for argv in lines:
        assert argv[0] == "alembic"
        args = [a.replace("sqlite:///queue.db", f"sqlite:///{db}") for a in argv[1:]]
        alembic(*args)
    assert version(db) == ["harel_sa_0001"]
    assert version(db, "jobs") == [HEAD_REVISION]


def test_the_harel_sa_db_commands_of_the_docs(tmp_path: Path) -> None:
    """The ``harel-sa db`` lines of docs/alembic.md, run in order in an empty directory."""
    block = DOC.read_text().split("### `harel-sa db`", 1)[1].split("```sh\n", 1)[1]
    command = Path(sys.executable).parent / "harel-sa"
    for line in block.split("```", 1)[0].splitlines():
        argv = re.sub(r"\s+#.*$", "", line).split()
        assert argv[0] == "harel-sa"
        run([command, *argv[1:]], cwd=tmp_path)
    assert version(tmp_path / "queue.db") == [HEAD_REVISION]

"""``harel-sa --help`` (and each command's) imports none of the heavy packages (issue 57): the
parser is built from the standard library and harel_sa's own light modules, so help and
usage errors come at once; each command imports what it runs on when it runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.cli.conftest import ROOT

HEAVY = ("sqlalchemy", "pydantic", "psycopg", "psycopg_pool", "aiosqlite", "alembic")
HELPS = [
    [],
    ["demo"],
    ["db", "upgrade"],
    ["stats"],
    ["peek"],
    ["dead", "list"],
    ["pause"],
    ["backoff"],
    ["worker"],
    ["top"],
    ["web"],
]


def imported(*args: str) -> set[str]:
    """The top-level packages ``harel-sa ARGS --help`` imports (``-X importtime``)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "harel_sa", *args, "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage: harel-sa" in done.stdout
    return packages(done.stderr)


def packages(importtime: str) -> set[str]:
    names = [line.rsplit("|", 1)[-1].strip() for line in importtime.splitlines() if "|" in line]
    return {name.split(".")[0] for name in names}


@pytest.mark.parametrize("args", HELPS, ids=lambda a: " ".join(a) or "harel-sa")
def test_help_imports_no_heavy_package(args: list[str]) -> None:
    assert not imported(*args) & set(HEAVY)


def test_a_usage_error_imports_none_either() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "harel_sa", "pause"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 2 and "one of the arguments" in done.stderr
    assert "harel_sa.cli" in done.stderr and not packages(done.stderr) & set(HEAVY)

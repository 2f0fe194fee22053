"""Drive ``harel-sa`` as a user would: a real process, real files, its stdout and exit code."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """``cli("stats", "--db", path, input="y\\n")``: run ``python -m harel_sa`` in ``tmp_path``.

    Standard input is empty (closed at once) unless ``input`` is given.
    """

    def run(
        *args: str, input: str = "", timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "harel_sa", *args],
            input=input,
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=timeout,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )

    return run


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.stderr == "" or "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The command failed with one line on stderr, no traceback, nothing on stdout."""
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert done.stdout == ""
    return lines[0]


def rows(db: str, sql: str) -> list[tuple[Any, ...]]:
    """Read the file behind the command's back, with plain sqlite3."""
    with sqlite3.connect(db) as conn:
        return conn.execute(sql).fetchall()

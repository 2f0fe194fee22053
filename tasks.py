#!/usr/bin/env python3
"""The repository's commands; they need nothing but Python 3.11+ on a fresh clone.

    python3 tasks.py demo         # the main job on an embedded SQLite file (harel-sa demo)
    python3 tasks.py test         # ruff, mypy --strict, then the whole test suite
    python3 tasks.py test-lowest  # the test suite on the lowest versions pyproject.toml allows
    python3 tasks.py bench        # every benchmark; rewrites bench/RESULTS.md

Each creates its virtual environment when it is missing (.venv; .venv-lowest for test-lowest)
and (re)installs the project when pyproject.toml changed. Arguments after the command go to
the tool (``python3 tasks.py test -k fifo``).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
PYPROJECT = ROOT / "pyproject.toml"
# What the tests import: the docs test runs every block; tests/postgres needs psycopg.
TEST_EXTRAS = "dev,harel,metrics,top,postgres,web,otel,cron"
# The extras whose lower bounds test-lowest pins with the runtime ones.
LOWEST_EXTRAS = ("postgres", "web", "otel", "cron")


class Env:
    """A virtual environment with the project installed (editable) and its ``extras``."""

    def __init__(self, default: Path, variable: str) -> None:
        self.path = Path(os.environ.get(variable, default))
        self.bin = self.path / ("Scripts" if os.name == "nt" else "bin")
        self.python = self.bin / "python"

    def ensure(self, extras: str, *, lowest: bool = False) -> Env:
        if sys.version_info < (3, 11):  # noqa: UP036 - runs under whatever python3 a user has
            sys.exit(f"harel_sa needs Python 3.11+, this is {sys.version.split()[0]}")
        if not self.python.exists():
            say(f"creating the virtual environment {self.path.name} (once)")
            venv.EnvBuilder(with_pip=True).create(self.path)
        digest = hashlib.sha256(PYPROJECT.read_bytes() + extras.encode()).hexdigest()
        stamp = self.path / f".harel_sa-{extras}"
        if stamp.exists() and stamp.read_text() == digest:
            return self
        say("upgrading pip in it")
        run(self.python, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
        pins: list[object] = []
        if lowest:
            constraints = self.path / "lowest-constraints.txt"
            constraints.write_text("".join(f"{pin}\n" for pin in lowest_pins()))
            pins = ["-c", constraints]
        say(
            f"installing harel-sa and its extras ({extras})"
            + (" at their lowest versions" if lowest else "")
            + ": a minute or two the first time, quiet meanwhile"
        )
        run(self.python, "-m", "pip", "install", "--quiet", *pins, "-e", f".[{extras}]")
        stamp.write_text(digest)
        say("ready")
        return self


def say(step: str) -> None:
    """One line a step of setting up, so a first run is not silent while pip works."""
    print(f"tasks.py: {step}", flush=True)


def lowest_pins() -> list[str]:
    """``name==version`` for the lower bound of every runtime dependency in pyproject.toml and
    of every dependency of the extras in ``LOWEST_EXTRAS``."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    specs = list(project["dependencies"])
    for extra in LOWEST_EXTRAS:
        specs += project["optional-dependencies"][extra]
    pins = []
    for spec in specs:
        found = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?>=([^,;\s]+)", spec)
        if found is None:
            sys.exit(f"tasks.py: {spec!r} has no plain lower bound to pin")
        pins.append(f"{found[1]}=={found[2]}")
    return pins


def run(*argv: object) -> None:
    code = subprocess.call([str(a) for a in argv], cwd=ROOT)
    if code:
        sys.exit(code)


def main(argv: list[str]) -> None:
    command, rest = (argv[0], argv[1:]) if argv else ("help", [])
    dev = Env(ROOT / ".venv", "HAREL_SA_VENV")
    if command == "demo":
        dev.ensure("dev")
        run(dev.bin / "harel-sa", "demo", *rest)
    elif command == "test":
        dev.ensure(TEST_EXTRAS)
        run(dev.bin / "ruff", "check", ".")
        run(dev.bin / "ruff", "format", "--check", ".")
        run(dev.bin / "mypy")
        run(dev.python, "-m", "pytest", *rest)
    elif command == "test-lowest":
        low = Env(ROOT / ".venv-lowest", "HAREL_SA_LOWEST_VENV").ensure(TEST_EXTRAS, lowest=True)
        run(low.python, "-m", "pip", "list", "--format=freeze")
        run(low.python, "-m", "pytest", *rest)
    elif command == "bench":
        dev.ensure(f"{TEST_EXTRAS},bench")
        run(dev.python, "bench/run.py", *rest)
    else:
        print(__doc__)
        sys.exit(0 if command == "help" else 2)


if __name__ == "__main__":
    main(sys.argv[1:])

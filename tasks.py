#!/usr/bin/env python3
"""The repository's commands; they need nothing but Python 3.11+ on a fresh clone.

    python3 tasks.py demo    # the main job on an embedded SQLite file (harel-sa demo)
    python3 tasks.py test    # ruff, mypy --strict, then the whole test suite
    python3 tasks.py bench   # every benchmark; rewrites bench/RESULTS.md

Each creates .venv when it is missing and (re)installs the project when pyproject.toml
changed. Arguments after the command go to the tool (``python3 tasks.py test -k fifo``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("HAREL_SA_VENV", ROOT / ".venv"))
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"


def ensure(extras: str) -> None:
    """Create the venv if missing; install the project with ``extras`` if not done yet."""
    if sys.version_info < (3, 11):  # noqa: UP036 - runs under whatever python3 a user has
        sys.exit(f"harel_sa needs Python 3.11+, this is {sys.version.split()[0]}")
    if not PY.exists():
        print(f"creating {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + extras.encode()).hexdigest()
    stamp = VENV / f".harel_sa-{extras}"
    if stamp.exists() and stamp.read_text() == digest:
        return
    run(PY, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    run(PY, "-m", "pip", "install", "--quiet", "-e", f".[{extras}]")
    stamp.write_text(digest)


def run(*argv: object) -> None:
    code = subprocess.call([str(a) for a in argv], cwd=ROOT)
    if code:
        sys.exit(code)


def main(argv: list[str]) -> None:
    command, rest = (argv[0], argv[1:]) if argv else ("help", [])
    if command == "demo":
        ensure("dev")
        run(BIN / "harel-sa", "demo", *rest)
    elif command == "test":
        ensure("dev")
        run(BIN / "ruff", "check", ".")
        run(BIN / "ruff", "format", "--check", ".")
        run(BIN / "mypy")
        run(PY, "-m", "pytest", *rest)
    elif command == "bench":
        ensure("dev,bench")
        run(PY, "bench/run.py", *rest)
    else:
        print(__doc__)
        sys.exit(0 if command == "help" else 2)


if __name__ == "__main__":
    main(sys.argv[1:])

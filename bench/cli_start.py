"""How fast ``harel-sa`` starts (issue 57) and ``harel_sa`` imports (issue 58): ``harel-sa
--help``, ``harel-sa worker --help`` and ``from harel_sa import SqliteTransport`` against a bare
``python -c pass``, in fresh processes, in turns.

    .venv/bin/python bench/run.py --only start --merge
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ab import _tree
from common import Config, Row, X, fmt_ratio, med, ratios, summary, verdict

#: The issue's bar: a command's help at most this many times a bare interpreter's start.
LIMIT = 10.0
CASES = {
    "bare": [sys.executable, "-c", "pass"],
    "help": [sys.executable, "-m", "harel_sa", "--help"],
    "worker help": [sys.executable, "-m", "harel_sa", "worker", "--help"],
    "import": [sys.executable, "-c", "from harel_sa import SqliteTransport"],
}


def _once(argv: list[str], tree: Path | None = None) -> float:
    env = None if tree is None else {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, env=env, cwd=tree)
    return time.perf_counter() - start


def run(cfg: Config) -> dict[str, Any]:
    """With ``HAREL_SA_AB_BASE=REV``, REV's import is timed in the same turns (``base``)."""
    cases = {name: (argv, None) for name, argv in CASES.items()}
    base = os.environ.get("HAREL_SA_AB_BASE")
    if base:
        tree = _tree(base, Path(tempfile.mkdtemp(dir=cfg.workdir)))
        cases["base import"] = (CASES["import"], tree)
    out: dict[str, list[float]] = {name: [] for name in cases}
    for rep in range(cfg.reps * 4):
        names = list(cases) if rep % 2 == 0 else list(cases)[::-1]
        for name in names:
            out[name].append(_once(*cases[name]))
    return {
        "base": base,
        "seconds": out,
        **{
            f"ratio {k}": [a / b for a, b in zip(v, out["bare"], strict=True)]
            for k, v in out.items()
        },
    }


def targets(w: dict[str, Any]) -> list[Row]:
    return [
        (
            f"`harel-sa{' worker' if 'worker' in k else ''} --help` ÷ bare python ≤ {LIMIT:g}{X}",
            fmt_ratio(w[f"ratio {k}"]),
            verdict(med(w[f"ratio {k}"]) <= LIMIT),
        )
        for k in ("help", "worker help")
    ]


def section(w: dict[str, Any]) -> list[str]:
    bare = med(w["seconds"]["bare"]) * 1e3
    key = "ratio import" if "ratio import" in w else "ratio import harel_sa"
    imported = med(w["seconds"]["import" if "import" in w["seconds"] else "import harel_sa"])
    than = ""
    if w.get("base"):
        ratio = fmt_ratio(ratios(w["seconds"]["import"], w["seconds"]["base import"]))
        than = f"; ÷ {w['base']}'s {ratio}"
    return summary(
        "Starting the command (issues 57, 58)",
        f"Fresh processes in turns; bare `python -c pass` {bare:.0f} ms; `from harel_sa import"
        f" SqliteTransport` {imported * 1e3:.0f} ms, {fmt_ratio(w[key])}{than}.",
        targets(w),
    )

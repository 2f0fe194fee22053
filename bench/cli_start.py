"""How fast ``harel-sa`` starts (issue 57): ``harel-sa --help`` and ``harel-sa worker --help``
against a bare ``python -c pass``, in fresh processes, in turns.

    .venv/bin/python bench/run.py --only start --merge
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

from common import Config, Row, X, fmt_ratio, med, summary, verdict

#: The issue's bar: a command's help at most this many times a bare interpreter's start.
LIMIT = 10.0
CASES = {
    "bare": [sys.executable, "-c", "pass"],
    "help": [sys.executable, "-m", "harel_sa", "--help"],
    "worker help": [sys.executable, "-m", "harel_sa", "worker", "--help"],
    "import harel_sa": [sys.executable, "-c", "import harel_sa"],
}


def _once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - start


def run(cfg: Config) -> dict[str, Any]:
    out: dict[str, list[float]] = {name: [] for name in CASES}
    for rep in range(cfg.reps * 4):
        names = list(CASES) if rep % 2 == 0 else list(CASES)[::-1]
        for name in names:
            out[name].append(_once(CASES[name]))
    return {
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
    imported = fmt_ratio(w["ratio import harel_sa"])
    return summary(
        "Starting the command (issue 57)",
        f"Fresh processes in turns; bare `python -c pass` {bare:.0f} ms, `import harel_sa`"
        f" {imported}.",
        targets(w),
    )

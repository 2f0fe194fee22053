"""Workload "ab": this tree against an earlier revision, in the same run (issue 41's guard).

``HAREL_SA_AB_BASE=REV bench/run.py --only ab --merge``: REV's ``harel_sa/`` (``git archive``)
and this tree's run each case in a fresh process of their own, alternately, the first to run
swapped every repetition; the harness (this file, ``batches.drain``) is this tree's for both.
Cases: transport calls (``publish``, fused ``ack_and_claim``) on SQLite at NORMAL and on
PostgreSQL; the unbatched and batched ``Worker`` and the batched ``AsyncWorker`` draining at
FULL and NORMAL. Figures are messages a second; a ratio is this tree's over REV's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

from common import DASH, Config, Row, X, fmt_ratio, med, ratios, verdict

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: case -> (the least ratio the issue accepts, sizes (messages, groups))
CASES: dict[str, tuple[float, tuple[int, int]]] = {
    "publish, SQLite NORMAL": (0.95, (3000, 100)),
    "ack_and_claim, SQLite NORMAL": (0.95, (3000, 100)),
    "publish, PostgreSQL": (0.95, (1500, 100)),
    "ack_and_claim, PostgreSQL": (0.95, (1500, 100)),
    "Worker, FULL": (0.95, (2000, 100)),
    "Worker, NORMAL": (0.95, (5000, 100)),
    "Worker batched, FULL": (0.85, (20000, 1000)),
    "Worker batched, NORMAL": (0.85, (20000, 1000)),
    "AsyncWorker batched, FULL": (0.85, (20000, 1000)),
    "AsyncWorker batched, NORMAL": (0.85, (20000, 1000)),
}


def _tree(rev: str, into: Path) -> Path:
    """``rev``'s harel_sa/ (and migrations/, which it ships) unpacked under ``into``."""
    archive = subprocess.run(
        ["git", "archive", rev, "harel_sa", "migrations"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def _one(tree: Path, case: str, pg_url: str | None, workdir: Path) -> float:
    done = subprocess.run(
        [sys.executable, __file__, case, str(workdir), pg_url or ""],
        capture_output=True,
        text=True,
        check=True,
        cwd=workdir,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(HERE)])},
    )
    return float(done.stdout.split()[-1])


def run(cfg: Config) -> dict[str, Any]:
    base = os.environ.get("HAREL_SA_AB_BASE")
    if not base:
        raise SystemExit("workload ab: set HAREL_SA_AB_BASE to the revision to compare with")
    rev = subprocess.run(
        ["git", "rev-parse", "--short", base], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    from pg_server import Server

    server = Server(cfg.workdir)
    out: dict[str, Any] = {"base": rev, "cases": {}}
    try:
        trees = {"base": _tree(rev, Path(tempfile.mkdtemp(dir=cfg.workdir))), "this": ROOT}
        for case in CASES:
            figures: dict[str, list[float]] = {"base": [], "this": []}
            for rep in range(cfg.reps):
                for which in ("base", "this") if rep % 2 == 0 else ("this", "base"):
                    url = server.database() if "PostgreSQL" in case else None
                    work = Path(tempfile.mkdtemp(dir=cfg.workdir))
                    figures[which].append(_one(trees[which], case, url, work))
                    if url is not None:
                        server.drop(url)
            out["cases"][case] = figures
            cfg.log(f"  ab {case}: {fmt_ratio(ratios(figures['this'], figures['base']))}")
    finally:
        server.stop()
    return out


def targets(w: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for case, figures in w["cases"].items():
        least = CASES[case][0] if case in CASES else 0.95
        r = ratios(figures["this"], figures["base"])
        rows.append(
            (
                f"{case}: this tree ÷ {w['base']} ≥ {least}{X}",
                fmt_ratio(r),
                verdict(med(r) >= least),
            )
        )
    return rows


def section(w: dict[str, Any]) -> list[str]:
    each = {case: ratios(f["this"], f["base"]) for case, f in w["cases"].items()}
    figures = "; ".join(f"{case} {med(x):.2f}{X}" for case, x in each.items())
    spread = [r for x in each.values() for r in x]
    return [
        f"## A/B: this tree against {w['base']}",
        "",
        "Messages a second, this tree ÷ the base, fresh processes in turns (bars: issue 41's):"
        f" {figures}; every repetition within {min(spread):.2f}{DASH}{max(spread):.2f}{X}.",
        "",
    ]


# --- one case, in a process of its own (PYTHONPATH: the tree under test, then bench/) --------


def _case(case: str, workdir: Path, pg_url: str) -> float:
    from harel_sa import Event

    n, groups = CASES[case][1]
    if case.startswith(("publish", "ack_and_claim")):
        if "PostgreSQL" in case:
            from harel_sa import PostgresTransport

            q: Any = PostgresTransport(pg_url)
        else:
            from harel_sa import SqliteTransport

            q = SqliteTransport(str(workdir / "q.db"), synchronous="NORMAL")
        event = Event(kind="x")
        t0 = time.perf_counter()
        for i in range(n):
            q.publish(f"g{i % groups}", event)
        published = n / (time.perf_counter() - t0)
        if case.startswith("publish"):
            q.close()
            return published
        t0 = time.perf_counter()
        lease, k = q.claim("w", 300.0), 0
        while lease is not None:
            _, lease = q.ack_and_claim(lease, "w", 300.0)
            k += 1
        q.close()
        return k / (time.perf_counter() - t0)
    from batches import drain

    variant, sync = case.split(", ")
    items = [(f"g{i % groups}", Event(kind="x", data={"i": i})) for i in range(n)]
    return drain(variant, str(workdir / "q.db"), sync, items)


if __name__ == "__main__":
    print(_case(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))

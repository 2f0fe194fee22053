"""Workload "mechanisms": does each speed mechanism of the batching worker earn its place?

Issue 41's rule: a mechanism that buys less than ~5% goes. Two are measured, each switched off
in a fresh process of its own (a patch here, none in harel_sa): the wake policy
(``harel_sa.worker.wake``; off: no handler counts as quick, so every waiting lease wakes a
slot) and the slot's turn (off: a slot whose ack makes a batch due rings the batcher's routine
instead of sending the batch itself). The batched ``Worker`` and ``AsyncWorker`` drain
(``batches.drain``: 20,000 zero-work messages over 1,000 groups) at FULL and NORMAL, the three
arms in turns. A ratio: as shipped ÷ the mechanism off; it stays if one case shows >= 1.05x.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from common import Config, Row, X, fmt_ratio, med, ratios, table, verdict

HERE = Path(__file__).resolve().parent
CASES = ("Worker batched, FULL", "Worker batched, NORMAL")
CASES += ("AsyncWorker batched, FULL", "AsyncWorker batched, NORMAL")
#: arm -> what it switches off
ARMS = {"shipped": "", "wake": "the wake policy", "turn": "the slot's turn"}
CHILD = r"""
import sys, tempfile
arm = sys.argv[3]
if arm == "wake":
    import harel_sa.worker.wake as wake
    wake.QUICK = -1.0
elif arm == "turn":
    import harel_sa.worker.programs as programs

    def turn(run, owner):  # give the turn back at once and ring the routine
        owner._turn.release()
        owner.handoff.ring()
        return
        yield

    programs.turn = turn
from harel_sa import Event
from batches import drain
variant, sync = sys.argv[1], sys.argv[2]
items = [(f"g{i % 1000}", Event(kind="x", data={"i": i})) for i in range(int(sys.argv[4]))]
print(drain(variant, tempfile.mkdtemp() + "/q.db", sync, items))
"""


def _one(case: str, arm: str, n: int, workdir: Path) -> float:
    variant, sync = case.split(", ")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)])}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, variant, sync, arm, str(n)],
        capture_output=True,
        text=True,
        check=True,
        cwd=workdir,  # not the checkout: ``-c`` puts the working directory first on sys.path
        env=env,
    )
    return float(done.stdout.split()[-1])


def run(cfg: Config) -> dict[str, Any]:
    n = cfg.size(2000, 20000)
    out: dict[str, Any] = {"n": n, "cases": {}}
    for case in CASES:
        figures: dict[str, list[float]] = {arm: [] for arm in ARMS}
        for rep in range(cfg.reps):
            for arm in list(ARMS) if rep % 2 == 0 else list(ARMS)[::-1]:
                work = Path(tempfile.mkdtemp(dir=cfg.workdir))
                figures[arm].append(_one(case, arm, n, work))
        out["cases"][case] = figures
        cfg.log(f"  mechanisms {case}: {figures}")
    return out


def targets(w: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for arm, what in list(ARMS.items())[1:]:
        each = {c: ratios(f["shipped"], f[arm]) for c, f in w["cases"].items()}
        best = max(each, key=lambda c: med(each[c]))
        rows.append(
            (
                f"{what}: as shipped ÷ without ≥ 1.05{X} in one case",
                f"{best}: {fmt_ratio(each[best])}",
                verdict(med(each[best]) >= 1.05),
            )
        )
    return rows


def section(w: dict[str, Any]) -> list[str]:
    cases = list(w["cases"])
    rows = [
        [
            what,
            *(fmt_ratio(ratios(w["cases"][c]["shipped"], w["cases"][c][arm])) for c in cases),
            said,
        ]
        for (arm, what), (_, _, said) in zip(list(ARMS.items())[1:], targets(w), strict=True)
    ]
    short = [c.replace("batched, ", "") for c in cases]
    return [
        "## Batching mechanisms (issue 41): drains as shipped ÷ with one off",
        "",
        *table(["", *short, f"≥ 1.05{X} once"], rows),
        "",
    ]

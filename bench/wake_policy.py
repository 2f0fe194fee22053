"""Does the batching wake policy (``harel_sa.worker.wake``) earn its place? Issue 41's rule: a
wake policy stays only if it shows >= 5% in the bench.

``.venv/bin/python bench/wake_policy.py [REPS]``: the batched ``Worker`` and ``AsyncWorker``
drain (``batches.drain``: 20,000 zero-work messages over 1,000 groups) at FULL and NORMAL, each
run in a fresh process, alternately with the policy on and off (off: no handler counts as
quick, so every waiting lease wakes a slot). Prints messages a second and on ÷ off per case.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ONE = r"""
import sys, tempfile
if sys.argv[1] == "off":
    import harel_sa.worker.steps as steps
    steps.QUICK = -1.0
from harel_sa import Event
from batches import drain
items = [(f"g{i % 1000}", Event(kind="x", data={"i": i})) for i in range(20000)]
print(drain(sys.argv[3], tempfile.mkdtemp() + "/q.db", sys.argv[2], items))
"""


def one(policy: str, sync: str, variant: str) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)])}
    done = subprocess.run(
        [sys.executable, "-c", ONE, policy, sync, variant],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return float(done.stdout.split()[-1])


def main(reps: int) -> None:
    for variant in ("Worker batched", "AsyncWorker batched"):
        for sync in ("FULL", "NORMAL"):
            got: dict[str, list[float]] = {"on": [], "off": []}
            for rep in range(reps):
                for policy in ("on", "off") if rep % 2 == 0 else ("off", "on"):
                    got[policy].append(one(policy, sync, variant))
            r = [a / b for a, b in zip(got["on"], got["off"], strict=True)]
            print(
                f"{variant}, {sync}: on {statistics.median(got['on']):,.0f}/s, "
                f"off {statistics.median(got['off']):,.0f}/s, on ÷ off "
                f"{statistics.median(r):.2f}x ({min(r):.2f}-{max(r):.2f})"
            )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)

"""Run every benchmark workload and rewrite ``bench/RESULTS.md`` (and its plots).

    .venv/bin/python bench/run.py            # the real sizes, 5 repetitions (minutes)
    .venv/bin/python bench/run.py --quick    # small sizes, a smoke run
    .venv/bin/python bench/run.py --only w7 --merge   # rerun one workload, keep the others
    .venv/bin/python bench/run.py --render   # measure nothing: RESULTS.md from results.json
    python3 tasks.py bench [--quick]         # the same, creating the venv if needed

A ``--quick`` run writes into a temporary directory (printed at the end) unless ``--out`` is
given, so a smoke run never replaces the real results.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import ab  # noqa: E402
import batches  # noqa: E402
import charts  # noqa: E402
import cli_start  # noqa: E402
import failover  # noqa: E402
import flow  # noqa: E402
import harel_peer  # noqa: E402
import mechanisms  # noqa: E402
import one_cpu  # noqa: E402
import outbox  # noqa: E402
import pg_bench  # noqa: E402
import pg_pooler  # noqa: E402
import pg_profile  # noqa: E402
import pressure  # noqa: E402
import procs  # noqa: E402
import report  # noqa: E402
import scheduling  # noqa: E402
import upgrade_locks  # noqa: E402
import wal  # noqa: E402
import workloads  # noqa: E402
from common import Config  # noqa: E402

WORKLOADS = (
    "w1", "w2", "w3", "w4", "w5", "w6", "w7", "fast", "batch", "cpu", "harel", "pg", "pooler",
    "upgrade", "outbox", "scheduling", "mechanisms", "pressure",
    "pgprofile", "flow", "start", "failover",
)  # fmt: skip
#: Run only when asked for (``--only ab``): it needs HAREL_SA_AB_BASE.
ON_REQUEST = ("ab",)
W3_VARIANTS = tuple(procs.VARIANTS)
W3_QUICK = ("plain", "handoff", "baseline")


def environment(command: str) -> dict[str, str]:
    cpu = platform.processor() or "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    os_name = platform.platform()
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = f"{line.split('=', 1)[1].strip(chr(34))} ({platform.platform()})"

    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    commit = "?"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        root = HERE.parent
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "harel_sa"],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
        commit = head + (" (harel_sa/ has uncommitted changes)" if dirty else "")
    return {
        "command": f"`{command}`",
        "CPU": f"{cpu}, {os.cpu_count()} cores",
        "OS": os_name,
        "Python": platform.python_version(),
        "SQLite": sqlite3.sqlite_version,
        "SQLAlchemy": version("sqlalchemy"),
        "Alembic": version("alembic"),
        "pydantic": version("pydantic"),
        "aiosqlite": version("aiosqlite"),
        "harel (the engine)": version("harel"),
        "harel_sa": f"{version('harel-sa')} at {commit}",
        "load average (1 min) at start": f"{os.getloadavg()[0]:.2f}",
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument(
        "--reps", type=int, help="repetitions of each figure (>= 3; default 5, 3 with --quick)"
    )
    parser.add_argument("--out", type=Path, help="where RESULTS.md and the plots go")
    parser.add_argument(
        "--only",
        default=",".join(WORKLOADS),
        help=f"comma-separated subset of {WORKLOADS + ON_REQUEST}",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the other workloads' results from the existing results.json in --out",
    )
    parser.add_argument(
        "--render",
        action="store_true",
        help="measure nothing: write RESULTS.md and the plots again from --out's results.json",
    )
    args = parser.parse_args(argv)
    if args.render:
        return render(args.out or HERE)
    if args.reps is None:
        args.reps = 3 if args.quick else 5
    if args.reps < 3:
        parser.error("--reps must be at least 3: every figure is a median of three or more runs")
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = set(only) - set(WORKLOADS) - set(ON_REQUEST)
    if unknown:
        parser.error(f"unknown workloads: {sorted(unknown)}")
    if "cpu" in only and not one_cpu.supported():
        parser.error("workload cpu holds processes to one CPU: os.sched_setaffinity (Linux) only")
    out: Path = args.out or (Path(tempfile.mkdtemp(prefix="harel-bench-")) if args.quick else HERE)
    out.mkdir(parents=True, exist_ok=True)

    exe = os.path.relpath(sys.executable) if not sys.executable.startswith("/usr") else "python3"
    # The variables that choose what runs are part of the command (the pooler's second PgBouncer).
    chosen = [
        f"{k}={os.environ[k]}"
        for k in ("HAREL_SA_PGBOUNCER", "HAREL_SA_AB_BASE")
        if os.environ.get(k)
    ]
    command = shlex.join([*chosen, exe, os.path.relpath(__file__), *argv])
    env = environment(command)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="harel-bench-db-"))

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {msg}", flush=True)

    cfg = Config(quick=args.quick, reps=args.reps, workdir=work, log=log)
    steps: dict[str, Callable[[], Any]] = {
        "w1": lambda: workloads.w1_drain(cfg),
        "w2": lambda: workloads.w2_backlog(cfg),
        "w3": lambda: procs.w3_processes(cfg, W3_QUICK if args.quick else W3_VARIANTS),
        "w4": lambda: workloads.w4_async(cfg),
        "w5": lambda: procs.w5_second_writer(cfg),
        "w6": lambda: workloads.w6_walk(cfg),
        "w7": lambda: wal.w7_wal(cfg),
        "fast": lambda: workloads.fast_paths(cfg),
        "batch": lambda: batches.run(cfg),
        "cpu": lambda: one_cpu.run(cfg),
        "harel": lambda: harel_peer.run(cfg),
        "pg": lambda: pg_bench.run(cfg),
        "pooler": lambda: pg_pooler.run(cfg),
        "upgrade": lambda: upgrade_locks.run(cfg),
        "outbox": lambda: outbox.run(cfg),
        "scheduling": lambda: scheduling.run(cfg),
        "flow": lambda: flow.run(cfg),
        "start": lambda: cli_start.run(cfg),
        "failover": lambda: failover.run(cfg),
        "mechanisms": lambda: mechanisms.run(cfg),
        "pressure": lambda: pressure.run(cfg),
        "pgprofile": lambda: pg_profile.run(cfg),
        "ab": lambda: ab.run(cfg),
    }
    results: dict[str, Any] = {}
    timings: dict[str, float] = {}
    try:
        for key in only:
            log(f"{key} ...")
            t0 = time.monotonic()
            results[key] = steps[key]()
            timings[key] = time.monotonic() - t0
            log(f"{key} done in {timings[key]:.0f}s")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    if args.merge and (out / "results.json").exists():
        # The other workloads' figures stay as their run measured them; the table says so.
        kept = json.loads((out / "results.json").read_text())
        fresh = ", ".join(results)
        results = {**kept["results"], **results}
        # A rerun on another machine says so: its figures and the others' are not comparable.
        machine = "" if env["CPU"] == kept["env"].get("CPU") else f" on {env['CPU']}"
        env = {
            **kept["env"],
            f"rerun of {fresh}": f"{env['command']} at {env['harel_sa']}{machine}, "
            f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        }
    total = time.monotonic() - started
    if not args.merge:
        env["load average (1 min) at end"] = f"{os.getloadavg()[0]:.2f}"
        env["sizes"] = "quick (smoke run)" if args.quick else "default (the real sizes)"
        env["repetitions"] = str(args.reps)
        env["run time"] = (
            f"{total:.0f} s (" + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()) + ")"
        )
        env["finished"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    # The figures first: a report that fails to render loses no measurement.
    (out / "results.json").write_text(json.dumps({"env": env, "results": results}, indent=1))
    log(f"wrote {out / 'results.json'}")
    return render(out)


def render(out: Path) -> int:
    """RESULTS.md and the plots in ``out``, from its results.json; the targets, printed."""
    kept = json.loads((out / "results.json").read_text())
    results, env = kept["results"], kept["env"]
    charts.plots(results, out)
    if "pressure" in results:
        (out / pressure.DETAILS).write_text(pressure.details(results["pressure"]))
    (out / "RESULTS.md").write_text(report.render(results, env))
    print(f"wrote {out / 'RESULTS.md'}")
    for target, figures, verdict in report.targets(results):
        print(f"  {verdict.replace('**', ''):>10}  {target}: {figures}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

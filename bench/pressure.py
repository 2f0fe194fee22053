"""Workload ``pressure`` (issue 62): the field's job-queue benchmark, natively, in short phases.

Each system runs as an adapter of hardbyte/postgresql-job-queue-benchmarking's JSONL protocol
(``bench/jobqueue/``) against its own database of one throw-away cluster set up as that harness
sets its server (autovacuum at its defaults, said out loud; ``synchronous_commit = on``). This
module is the harness's phase driver in small: it starts the adapter, enters and leaves each
phase (a transaction holding an xid for ``idle-in-tx``, REPEATABLE READ scans for
``active-readers``, the rate file raised for ``high-load``, ``pg_terminate_backend`` every
second for ``backend-kill``), and reads the adapter's samples and the tables' dead tuples.

    .venv/bin/python bench/pressure.py --systems harel_sa,harel_sa_64 --phases short
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from tests import pg_cluster  # noqa: E402

ADAPTERS = HERE / "jobqueue"
PGBOSS_VERSION = "12.18.2"
#: The harness's postgres.conf, as far as a throw-away cluster takes it.
SERVER = {
    "synchronous_commit": "on",
    "shared_buffers": "256MB",
    "work_mem": "8MB",
    "maintenance_work_mem": "128MB",
    "max_connections": "200",
    "autovacuum": "on",
    "autovacuum_naptime": "60s",
    "autovacuum_vacuum_cost_delay": "2ms",
    "autovacuum_vacuum_cost_limit": "200",
    "autovacuum_vacuum_scale_factor": "0.2",
    "autovacuum_analyze_scale_factor": "0.1",
    "autovacuum_vacuum_threshold": "50",
    "autovacuum_analyze_threshold": "50",
}


@dataclass(frozen=True)
class Phase:
    label: str
    kind: str  # warmup, clean, idle-in-tx, recovery, active-readers, high-load, backend-kill
    seconds: int


PHASES = {
    # The harness's multiphase scenario, shortened: clean, a pinned horizon, recovery,
    # readers, 1.5x load, backends killed every second, recovery.
    "short": (
        Phase("warmup", "warmup", 10),
        Phase("clean", "clean", 30),
        Phase("idle", "idle-in-tx", 60),
        Phase("recovery", "recovery", 40),
        Phase("readers", "active-readers", 30),
        Phase("high", "high-load", 30),
        Phase("kills", "backend-kill", 20),
        Phase("after", "recovery", 20),
    ),
    "idle": (
        Phase("warmup", "warmup", 10),
        Phase("clean", "clean", 30),
        Phase("idle", "idle-in-tx", 60),
        Phase("recovery", "recovery", 40),
    ),
    "peak": (Phase("warmup", "warmup", 10), Phase("peak", "clean", 30)),
}


@dataclass(frozen=True)
class System:
    name: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    tables: tuple[str, ...] = ()


def systems(pgboss_dir: Path | None) -> dict[str, System]:
    py = sys.executable
    harel = (py, str(ADAPTERS / "harel_sa_adapter.py"))
    harel_tables = ("harel_transport_messages", "harel_transport_groups")
    out = {
        "harel_sa": System("harel_sa", harel, {"HAREL_SA_GROUPS": "0"}, harel_tables),
        "harel_sa_64": System("harel_sa_64", harel, {"HAREL_SA_GROUPS": "64"}, harel_tables),
        "harel_sa_unbatched": System(
            "harel_sa_unbatched",
            harel,
            {"HAREL_SA_GROUPS": "0", "HAREL_SA_BATCH": "1"},
            harel_tables,
        ),
        "procrastinate": System(
            "procrastinate",
            (py, str(ADAPTERS / "procrastinate_adapter.py")),
            {},
            ("procrastinate_jobs", "procrastinate_events"),
        ),
    }
    if pgboss_dir is not None:
        out["pgboss"] = System(
            "pgboss", ("node", str(ADAPTERS / "pgboss_adapter.js")),
            {"NODE_PATH": str(pgboss_dir / "node_modules")}, ("job",),
        )  # fmt: skip
    return out


def install_pgboss(cache: Path) -> Path | None:
    """pg-boss from the npm registry into ``cache`` (once); None without node and npm."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return None
    folder = cache / f"pgboss-{PGBOSS_VERSION}"
    if not (folder / "node_modules" / "pg-boss").exists():
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "package.json").write_text(
            json.dumps({"private": True, "dependencies": {"pg-boss": PGBOSS_VERSION}})
        )
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=folder, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if done.returncode:
            print(f"  pg-boss not installed: {done.stderr.strip()[-300:]}")
            return None
    return folder


class Hooks:
    """Entering and leaving each phase kind, on one system's database."""

    def __init__(self, url: str, rate_file: Path, base_rate: float, tables: tuple[str, ...]):
        self.url, self.rate_file, self.base_rate, self.tables = url, rate_file, base_rate, tables
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.holder: psycopg.Connection[Any] | None = None
        self.kills = 0

    def enter(self, kind: str) -> None:
        self.stop.clear()
        if kind == "idle-in-tx":
            self.holder = psycopg.connect(self.url)
            self.holder.execute("SELECT txid_current()")  # an xid: the horizon is pinned
        elif kind == "active-readers":
            for _ in range(4):
                self._thread(self._reader)
        elif kind == "high-load":
            self.rate_file.write_text(str(self.base_rate * 1.5))
        elif kind == "backend-kill":
            self._thread(self._killer)

    def leave(self, kind: str) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=10)
        self.threads = []
        if self.holder is not None:
            self.holder.close()
            self.holder = None
        if kind == "high-load":
            self.rate_file.write_text(str(self.base_rate))

    def _thread(self, target: Any) -> None:
        t = threading.Thread(target=target, daemon=True)
        t.start()
        self.threads.append(t)

    def _reader(self) -> None:
        with psycopg.connect(self.url) as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            while not self.stop.wait(0.1):
                with contextlib.suppress(psycopg.Error):
                    conn.execute(f"SELECT count(*) FROM {self.tables[0]}").fetchall()

    def _killer(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stop.wait(1.0):
                rows = conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND backend_type = 'client backend'"
                ).fetchall()
                self.kills += len(rows)


def run_one(
    cluster: pg_cluster.Cluster,
    system: System,
    phases: tuple[Phase, ...],
    env: dict[str, str],
    log: Any,
) -> dict[str, Any]:
    """One adapter through ``phases``; its samples, dead tuples and phase bounds."""
    url = cluster.create_database(f"pressure_{system.name}")
    work = Path(tempfile.mkdtemp(prefix="harel-pressure-"))
    rate_file = work / "rate"
    base_rate = float(env.get("PRODUCER_RATE", "800"))
    rate_file.write_text(str(base_rate))
    full_env = {**os.environ, **env, **system.env, "DATABASE_URL": url,
                "PRODUCER_RATE_CONTROL_FILE": str(rate_file), "SAMPLE_EVERY_S": "1"}  # fmt: skip
    samples: list[tuple[float, str, float]] = []
    dead: list[tuple[float, int, int]] = []
    started = time.monotonic()
    with open(work / "stderr", "w") as stderr:
        proc = subprocess.Popen(
            list(system.argv), env=full_env, stdout=subprocess.PIPE, stderr=stderr, text=True,
            start_new_session=True,
        )  # fmt: skip

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with contextlib.suppress(ValueError, KeyError):
                r = json.loads(line)
                if r.get("kind") == "adapter":
                    samples.append((time.monotonic() - started, r["metric"], float(r["value"])))

    stop = threading.Event()

    def watch_dead() -> None:
        with contextlib.suppress(psycopg.Error), psycopg.connect(url, autocommit=True) as conn:
            while not stop.wait(1.0):
                try:
                    d, live = conn.execute(
                        "SELECT coalesce(sum(n_dead_tup), 0), coalesce(sum(n_live_tup), 0) "
                        "FROM pg_stat_user_tables WHERE relname = ANY(%s)",
                        (list(system.tables),),
                    ).fetchone() or (0, 0)
                    dead.append((time.monotonic() - started, int(d), int(live)))
                except psycopg.Error:
                    conn = psycopg.connect(url, autocommit=True)  # killed: a new session

    readers = [threading.Thread(target=read, daemon=True),
               threading.Thread(target=watch_dead, daemon=True)]  # fmt: skip
    for t in readers:
        t.start()
    hooks = Hooks(url, rate_file, base_rate, system.tables)
    bounds = []
    try:
        for phase in phases:
            t0 = time.monotonic() - started
            log(f"  {system.name}: {phase.label} ({phase.kind}, {phase.seconds}s)")
            hooks.enter(phase.kind)
            try:
                time.sleep(phase.seconds)
            finally:
                hooks.leave(phase.kind)
            bounds.append((phase.label, phase.kind, t0, time.monotonic() - started))
            if proc.poll() is not None:
                raise RuntimeError(f"{system.name} exited {proc.returncode}: "
                                   + (work / "stderr").read_text()[-2000:])  # fmt: skip
    finally:
        stop.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        errors = (work / "stderr").read_text()
        shutil.rmtree(work, ignore_errors=True)
        with contextlib.suppress(psycopg.Error):
            cluster.drop_database(url)
    return {"samples": samples, "dead": dead, "phases": bounds, "kills": hooks.kills,
            "stderr_tail": errors[-1500:]}  # fmt: skip


def summarize(run: dict[str, Any]) -> dict[str, Any]:
    """Per phase: the median completion and enqueue rates (the first two seconds left out:
    the change settling), pickup p50 and p99 (medians), the depth at its end, the most dead
    tuples; and how long after the pinned horizon the backlog took to fall under 100."""
    out: dict[str, Any] = {}
    for label, kind, t0, t1 in run["phases"]:

        def series(metric: str, a: float = t0 + 2, b: float = t1) -> list[float]:
            return [v for t, m, v in run["samples"] if m == metric and a <= t <= b]

        depth = series("queue_depth", t0, t1 + 1)
        out[label] = {
            "kind": kind,
            "completion": _median(series("completion_rate")),
            "enqueue": _median(series("enqueue_rate")),
            "p50_ms": _median(series("claim_p50_ms")),
            "p99_ms": _median(series("claim_p99_ms")),
            "depth_end": depth[-1] if depth else None,
            "depth_max": max(depth) if depth else None,
            "dead_max": max((d for t, d, _ in run["dead"] if t0 <= t <= t1), default=None),
        }
    ends = [t1 for label, kind, t0, t1 in run["phases"] if kind == "idle-in-tx"]
    if ends:
        after = [(t, v) for t, m, v in run["samples"] if m == "queue_depth" and t >= ends[0]]
        under = next((t for t, v in after if v < 100), None)
        out["recovered_s"] = None if under is None else round(under - ends[0], 1)
    out["backends_killed"] = run["kills"]
    return out


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


# --- the workload of bench/run.py --------------------------------------------------------------

#: The offered rate of the phased runs (jobs/s): what every harel_sa mode meets clean here.
RATE = 300
#: The systems whose peaks are compared, and those run through the phases.
PEAKS = ("harel_sa", "harel_sa_unbatched", "harel_sa_64", "procrastinate", "pgboss")
PHASED = ("harel_sa", "harel_sa_64", "procrastinate")
JOB_QUEUE_PEERS = ("procrastinate", "pgboss")


def _env(**more: str) -> dict[str, str]:
    return {"WORKER_COUNT": "8", "JOB_WORK_MS": "1", "PRODUCER_BATCH_MAX": "128",
            "PRODUCER_BATCH_MS": "10", "PRODUCER_RATE": str(RATE), **more}  # fmt: skip


def _shortened(phases: tuple[Phase, ...], quick: bool) -> tuple[Phase, ...]:
    return (
        tuple(Phase(p.label, p.kind, max(4, p.seconds // 5)) for p in phases) if quick else phases
    )


def run(cfg: Any) -> dict[str, Any]:
    """Peaks (depth held at 4,000) of every system, in turns, ``min(reps, 3)`` times; then one
    pass of the short phases at :data:`RATE` for harel_sa in both modes and procrastinate."""
    pgboss = install_pgboss(Path.home() / ".cache" / "harel-sa-bench")
    table = systems(pgboss)
    peaks = [name for name in PEAKS if name in table]
    peak_phases = _shortened((Phase("warmup", "warmup", 10), Phase("peak", "clean", 20)), cfg.quick)
    out: dict[str, Any] = {
        "rate": RATE,
        "workers": 8,
        "pgboss": PGBOSS_VERSION if pgboss else None,
        "peak": {name: [] for name in peaks},
        "phases": {},
    }
    cluster = pg_cluster.start(SERVER)
    try:
        for rep in range(min(cfg.reps, 3)):
            turn = peaks[rep % len(peaks) :] + peaks[: rep % len(peaks)]  # drift shared
            for name in turn:
                done = run_one(cluster, table[name], peak_phases,
                               _env(PRODUCER_MODE="depth-target", TARGET_DEPTH="4000"),
                               cfg.log)  # fmt: skip
                rate = summarize(done)["peak"]["completion"]
                out["peak"][name].append(rate)
                cfg.log(f"  pressure peak {name}: {rate} jobs/s")
        for name in PHASED:
            done = run_one(cluster, table[name], _shortened(PHASES["short"], cfg.quick), _env(),
                           cfg.log)  # fmt: skip
            out["phases"][name] = summarize(done)
            cfg.log(f"  pressure phases {name}: {json.dumps(out['phases'][name])}")
    finally:
        cluster.stop()
    return out


def _ratio_of(phases: dict[str, Any], label: str, base: str = "clean") -> float | None:
    a, b = phases.get(label, {}).get("completion"), phases.get(base, {}).get("completion")
    return None if not a or not b else a / b


def targets(w: dict[str, Any]) -> list[tuple[str, str, str]]:
    from common import X, fmt_num, fmt_ratio, ratios, verdict

    rows: list[tuple[str, str, str]] = []
    peers = [p for p in JOB_QUEUE_PEERS if p in w["peak"]]
    if peers and "harel_sa" in w["peak"]:
        best = [max(vals) for vals in zip(*(w["peak"][p] for p in peers), strict=True)]
        got = ratios(w["peak"]["harel_sa"], best)
        rows.append((
            f"Peak job-queue throughput ≥ 1.0{X} the best of {', '.join(peers)}",
            fmt_ratio(got), verdict(statistics.median(got) >= 1.0),
        ))  # fmt: skip
    grouped = w["phases"].get("harel_sa_64")
    if grouped:
        idle = _ratio_of(grouped, "idle")
        rows.append((
            f"64 groups, idle in transaction ÷ clean, at {w['rate']} jobs/s, ≥ 0.8{X}",
            "-" if idle is None else f"{fmt_num(idle)}{X} (one run)",
            verdict(idle is not None and idle >= 0.8),
        ))  # fmt: skip
        back = grouped.get("recovered_s")
        rows.append((
            "64 groups: a backlog under 100 within 30 s of the session's end",
            "never" if back is None else f"{back:g} s",
            verdict(back is not None and back <= 30),
        ))  # fmt: skip
    return rows


#: The phases' figures, beside RESULTS.md (which links to it): a table too wide for a summary.
DETAILS = "pressure.md"


def details(w: dict[str, Any]) -> str:
    """The phases' table: per phase and system, jobs/s, pickup p50/p99, the depth at its end."""
    from common import table

    first = next(iter(w["phases"].values()), {})
    cells = []
    for label, phase in first.items():
        if not isinstance(phase, dict) or phase["kind"] == "warmup":
            continue
        row = [phase["kind"]]
        for phases in w["phases"].values():
            p = phases.get(label, {})
            row.append(
                f"{p.get('completion', 0):.0f}/s, {p.get('p50_ms')}/{p.get('p99_ms')} ms,"
                f" depth {p.get('depth_end', 0):.0f}"
            )
        cells.append(row)
    from common import fmt

    peaks = [f"{name} {fmt(vals)}" for name, vals in w["peak"].items() if vals and all(vals)]
    if w.get("pgboss") is None:
        peaks.append("pg-boss not run (needs node and npm)")
    return "\n".join([
        "# Under pressure (bench/pressure.py)", "",
        "Peaks, the depth held at 4,000 (jobs/s): " + "; ".join(peaks) + ".", "",
        "## The phases", "",
        f"One run at {w['rate']} jobs/s (1.5x in high-load), {w['workers']} workers, 1 ms of"
        " work a job. Per phase: completion rate (median), pickup p50/p99 (medians of 30 s"
        " windows), queue depth at the phase's end.", "",
        *table(["phase", *w["phases"]], cells), "",
    ])  # fmt: skip


def section(w: dict[str, Any]) -> list[str]:
    from common import summary

    return summary(
        "Under pressure: the field's job-queue benchmark (issue 62)",
        "hardbyte/postgresql-job-queue-benchmarking's protocol (`bench/jobqueue/`), its"
        f" server settings: {w['workers']} workers, 1 ms a job; peaks at depth 4,000, in turns;"
        f" phases at {w['rate']} jobs/s; figures: [{DETAILS}]({DETAILS}).",
        targets(w),
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default="harel_sa,harel_sa_64,procrastinate,pgboss")
    parser.add_argument("--phases", default="short", choices=sorted(PHASES))
    parser.add_argument("--rate", type=int, default=300, help="the offered jobs/s (fixed mode)")
    parser.add_argument("--depth", type=int, default=0, help="depth-target mode at this depth")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--set", action="append", default=[], help="NAME=VALUE for adapters")
    parser.add_argument("--out", type=Path, help="write the raw runs and summaries here (JSON)")
    args = parser.parse_args(argv)
    t_start = time.monotonic()

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - t_start:6.1f}s] {msg}", flush=True)

    env = {"PRODUCER_RATE": str(args.rate), "WORKER_COUNT": str(args.workers),
           "JOB_WORK_MS": "1", "PRODUCER_BATCH_MAX": "128", "PRODUCER_BATCH_MS": "10"}  # fmt: skip
    if args.depth:
        env |= {"PRODUCER_MODE": "depth-target", "TARGET_DEPTH": str(args.depth)}
    env |= dict(item.split("=", 1) for item in args.set)
    wanted = [s for s in args.systems.split(",") if s]
    cache = Path.home() / ".cache" / "harel-sa-bench"
    pgboss = install_pgboss(cache) if "pgboss" in wanted else None
    table = systems(pgboss)
    cluster = pg_cluster.start(SERVER)
    results: dict[str, Any] = {}
    try:
        for name in wanted:
            if name not in table:
                log(f"{name}: not available here (pg-boss needs node and npm)")
                continue
            run = run_one(cluster, table[name], PHASES[args.phases], env, log)
            results[name] = {"summary": summarize(run), "run": run}
            log(f"{name}: {json.dumps(results[name]['summary'])}")
    finally:
        cluster.stop()
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

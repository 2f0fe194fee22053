"""RESULTS.md, a summary of one run's results: the command and the run, then one short section
per workload with its headline figures as ratios against the baseline and the peers measured
in the same run, each with its spread over the repetitions, and the targets. The raw figures
stay in results.json; the plots are drawn by :mod:`charts`."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import batches
import harel_peer
import one_cpu
import outbox
import pg_bench
import pg_pooler
import upgrade_locks
import wal
from charts import BACKLOG_PNG, PROCESSES_PNG
from common import (
    BASE,
    BEYOND,
    DASH,
    HAREL,
    Row,
    X,
    fmt,
    fmt_ratio,
    med,
    ratios,
    summary,
    table,
    verdict,
)

Report = Callable[[dict[str, Any]], list[Any]]

# --- the SQLite workloads of workloads.py and procs.py ---------------------------------------


def _claim_vs(w: dict[str, Any], label: str, impl: str, metric: str = "claim_full") -> list[float]:
    """Per repetition: ``impl``'s claim in case ``label`` ÷ its claim in the first case."""
    return ratios(w[metric][label][impl], w[metric][w["cases"][0]["label"]][impl])


def w1_targets(w: dict[str, Any]) -> list[Row]:
    x = ratios(w["FULL"]["drain"][HAREL], w["FULL"]["drain"][BASE])
    return [(f"Drain (claim+ack, FULL) ≥ 0.9{X} baseline", fmt_ratio(x), verdict(med(x) >= 0.9))]


def w1_section(w: dict[str, Any]) -> list[str]:
    rows = [
        (f"{phase} ({sync}), harel_sa ÷ baseline", fmt_ratio(ratios(x[HAREL], x[BASE])), "")
        for sync, phase in (("FULL", "publish"), ("NORMAL", "publish"), ("NORMAL", "drain"))
        for x in [w[sync][phase]]
    ]
    p = w["pages"]
    pages = [f"{p[i]['claim'] + p[i]['ack']:.1f}" for i in (HAREL, BASE)]
    rows.append(
        ("WAL pages a message, claim + ack (counted)", " vs the baseline's ".join(pages), "")
    )
    return summary(
        "1. Publish, then drain",
        f"{w['n']:,} messages over {w['groups']} groups, one `publish` call each, then drained"
        " by one worker with `claim` + `ack`.",
        [*w1_targets(w), *rows],
    )


def w2_targets(w: dict[str, Any]) -> list[Row]:
    ref = w["cases"][0]["label"]
    rows: list[Row] = []
    for label in (c["label"] for c in w["cases"][1:]):
        if label == "10k":
            continue
        x, select = _claim_vs(w, label, HAREL), _claim_vs(w, label, HAREL, "select")
        rows.append(
            (
                f"Claim at {label} ≤ 1.5{X} claim at {ref}",
                f"{fmt_ratio(x)}; the SELECT alone {fmt_ratio(select)}",
                verdict(med(x) <= 1.5),
            )
        )
    return rows


def w2_section(w: dict[str, Any]) -> list[str]:
    rows = [
        (
            f"Claim at {c['label']} (FULL), harel_sa ÷ baseline",
            fmt_ratio(
                ratios(w["claim_full"][c["label"]][HAREL], w["claim_full"][c["label"]][BASE])
            ),
            "",
        )
        for c in w["cases"]
    ]
    return summary(
        "2. Claim cost against backlog",
        "One claim at each backlog (each followed by an untimed `nack(0)`, so the backlog stays"
        " as it is; FULL), ÷ the same queue's claim at the smallest.",
        [*w2_targets(w), *rows],
        f"![claim cost against backlog]({BACKLOG_PNG})",
    )


def w3_targets(w: dict[str, Any]) -> list[Row]:
    if "plain" not in w["variants"]:
        return []
    v = w["variants"]["plain"]
    figs = "; ".join(
        f"{c} processes: busiest {fmt([s[0] for s in v[c]['shares']], 100)} %, Jain"
        f" {fmt(v[c]['jain'])}"
        for c in v
        if c != "1"
    )
    fair = all(med(v[c]["jain"]) >= 0.9 for c in v)
    return [
        (
            "Several processes: each one's share (and fair?)",
            figs,
            "reported; " + ("fair" if fair else "**not fair**"),
        )
    ]


def w3_section(w: dict[str, Any]) -> list[str]:
    most = str(w["procs"][-1])
    rows = [
        (
            f"`{v}`: {most} processes ÷ 1",
            f"{fmt_ratio(ratios(per[most]['rate'], per['1']['rate']))}; Jain"
            f" {fmt(per[most]['jain'])}; {sum(per[most]['refusals'])} refusals",
            "",
        )
        for v, per in w["variants"].items()
    ]
    return summary(
        "3. Worker processes draining one file",
        f"{w['n']:,} messages over {w['groups']} groups drained by"
        f" {', '.join(map(str, w['procs']))} `spawn`ed processes (FULL), in the variants of"
        " `bench/procs.py`. Jain's index: 1 when every process did the same work, 1/n when one"
        " did all. Refusals: lock waits that ended in BusyError (for `retry`, immediate"
        " refusals, retried).",
        [*w3_targets(w), *rows],
        f"![throughput and fairness against worker processes]({PROCESSES_PNG})",
    )


def w4_targets(w: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for sync in ("FULL", "NORMAL"):
        x = ratios(w[sync]["async"], w[sync]["sync"])
        label = f"Async twin ≥ 0.5{X} sync (claim+ack, {sync})"
        rows.append((label, fmt_ratio(x), verdict(med(x) >= 0.5)))
    return rows


def w4_section(w: dict[str, Any]) -> list[str]:
    rows = [
        (
            f"ack_and_claim ({sync}), async ÷ sync",
            fmt_ratio(ratios(w[sync]["async fused"], w[sync]["sync fused"])),
            "",
        )
        for sync in ("FULL", "NORMAL")
    ]
    return summary(
        "4. The async twin against the sync transport",
        f"{w['n']:,} messages over {w['groups']} groups drained by one worker: the sync"
        " transport, or one coroutine awaiting the async twin's calls in turn.",
        [*w4_targets(w), *rows],
    )


def w5_section(w: dict[str, Any]) -> list[str]:
    rows = [
        (
            f"{name} writer: the queue's msgs/s, same file ÷ own file",
            f"{fmt_ratio(ratios(per['same file']['queue'], per['own file']['queue']))}; the"
            " writer's tx/s"
            f" {fmt_ratio(ratios(per['same file']['writer'], per['own file']['writer']))};"
            f" {sum(per['same file']['refusals'])} refusals",
            "",
        )
        for name, per in w["writers"].items()
    ]
    return summary(
        "5. A busy second writer in the same file",
        f"For {w['window']:g} s the queue works (claim+ack, FULL) while another process commits"
        " one-row transactions on a table of its own, in the queue's file or in a file of its"
        " own. Refusals: lock waits that ended in BusyError, each retried.",
        rows,
    )


def w6_targets(w: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for label in (c["label"] for c in w["cases"][1:]):
        x = _claim_vs(w, label, HAREL)
        rows.append(
            (
                f"Claim {label} ≤ 3{X} a plain claim",
                f"{fmt_ratio(x)}; the baseline {fmt_ratio(_claim_vs(w, label, BASE))}",
                verdict(med(x) <= 3),
            )
        )
    return rows


def w6_section(w: dict[str, Any]) -> list[str]:
    return summary(
        "6. Claims behind parked and lower-priority groups",
        f"{w['ready']:,} ready groups; behind them {w['parked']:,} groups parked by"
        " `nack(delay=3600)`, or of priority 0 under `claim(min_priority=2)`. Measured as in"
        " workload 2.",
        w6_targets(w),
    )


def fast_targets(w: dict[str, Any]) -> list[Row]:
    p, f = w["publish"]["FULL"], w["fused"]["FULL"]
    x, y = ratios(p["calls"], p["many"]), ratios(f["fused"], f["separate"])
    return [
        (
            f"publish_many of {w['batch']:,} ≥ 10{X} {w['batch']:,} publish calls (FULL)",
            fmt_ratio(x),
            verdict(med(x) >= 10),
        ),
        (
            f"Fused ack_and_claim ≥ 1.5{X} separate ack + claim (FULL)",
            fmt_ratio(y),
            verdict(med(y) >= 1.5),
        ),
    ]


def fast_section(w: dict[str, Any]) -> list[str]:
    p, f = w["publish"]["NORMAL"], w["fused"]["NORMAL"]
    rows = [
        (
            "publish_many ÷ publish calls (NORMAL), speed-up",
            fmt_ratio(ratios(p["calls"], p["many"])),
            "",
        ),
        ("ack_and_claim ÷ separate (NORMAL)", fmt_ratio(ratios(f["fused"], f["separate"])), ""),
    ]
    return summary(
        "Fast paths: `publish_many` and fused `ack_and_claim`",
        f"`publish_many` of {w['batch']:,} messages (one transaction) against {w['batch']:,}"
        f" `publish` calls; {w['n']:,} messages over {w['groups']} groups drained by `claim` then"
        " `ack` (two transactions a message) or `ack_and_claim` (one).",
        [*fast_targets(w), *rows],
    )


# --- every workload --------------------------------------------------------------------------

#: Per workload, in the order of RESULTS.md: its targets and its section.
REPORTS: dict[str, tuple[Report, Report]] = {
    "w1": (w1_targets, w1_section),
    "w2": (w2_targets, w2_section),
    "w3": (w3_targets, w3_section),
    "w4": (w4_targets, w4_section),
    "w5": (lambda w: [], w5_section),
    "w6": (w6_targets, w6_section),
    "w7": (wal.targets, wal.section),
    "fast": (fast_targets, fast_section),
    "batch": (batches.targets, batches.section),
    "cpu": (one_cpu.targets, one_cpu.section),
    "harel": (harel_peer.targets, harel_peer.section),
    "pg": (pg_bench.targets, pg_bench.section),
    "pooler": (pg_pooler.targets, pg_pooler.section),
    "upgrade": (lambda w: [], upgrade_locks.section),
    "outbox": (outbox.targets, outbox.section),
}


def targets(r: dict[str, Any]) -> list[Row]:
    """(``[workload] target``, figures, verdict) of every target this run measured."""
    return [
        (f"[{key}] {label}", figures, said)
        for key, (rows, _) in REPORTS.items()
        if key in r
        for label, figures, said in rows(r[key])
    ]


# --- the whole file --------------------------------------------------------------------------

RERUN = "rerun of "  # run.py's key in env for a --merge run: "rerun of w1, w2"
#: The run's facts said in its sentence; every other key of env but the reruns is named.
SAID = ("command", "harel_sa", "finished", "CPU", "OS", "sizes", "repetitions")
VERSIONS = ("Python", "SQLite", "SQLAlchemy", "Alembic", "pydantic", "aiosqlite")
LOAD = "load average (1 min) at "


def _measured_by(r: dict[str, Any], env: dict[str, str]) -> list[list[str]]:
    """Which run measured each workload's figures last: [workloads, command and when]."""
    main = f"{env['command']} at {env['harel_sa']}, {env.get('finished', '?')}"
    latest: dict[str, tuple[str, str]] = {}
    for key, how in env.items():
        when = re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", how)
        if key.startswith(RERUN) and when:
            for name in key.removeprefix(RERUN).split(", "):
                if name not in latest or when.group() > latest[name][0]:
                    latest[name] = (when.group(), how)
    by: dict[str, list[str]] = {}
    for name in r:
        by.setdefault(latest.get(name, ("", main))[1], []).append(name)
    return [[", ".join(names), how] for how, names in by.items()]


def _run(r: dict[str, Any], env: dict[str, str]) -> list[str]:
    versions = ", ".join(f"{k} {env[k]}" for k in VERSIONS if k in env)
    load = " to ".join(env[LOAD + k] for k in ("start", "end") if LOAD + k in env)
    others = [
        k
        for k in env
        if k not in (*SAID, *VERSIONS) and not k.startswith((RERUN, LOAD, "run time"))
    ]
    return [
        "## Run",
        "",
        f"{env['CPU']}, {env['OS']}; {versions}; {env.get('repetitions', '?')} repetitions,"
        f" sizes {env.get('sizes', '?')}, load average {load or '?'} (the first run)."
        + (f" Also in results.json's env: {'; '.join(others)}." if others else ""),
        "",
        *table(["workloads", "measured last by"], _measured_by(r, env)),
        "",
    ]


def _overview(rows: list[Row]) -> list[str]:
    met = [r for r in rows if r[2].startswith("**met**")]
    missed = [r for r in rows if r[2].startswith("**NOT met**")]
    return [
        "## Targets",
        "",
        f"{len(met)} met, {len(missed)} not met, {len(rows) - len(met) - len(missed)} reported"
        " without a bar (each in its workload's section). Not met: "
        + ("; ".join(r[0] for r in missed) or "none")
        + ".",
        "",
    ]


def render(r: dict[str, Any], env: dict[str, str]) -> str:
    lines = [
        "# harel_sa benchmarks",
        "",
        "A summary written by `bench/run.py`: `.venv/bin/python bench/run.py` measures"
        " (`--only W --merge`: one workload, the others kept), `--render` writes this file and"
        " the plots again from `results.json`, measuring nothing. **Raw figures:"
        " [results.json](results.json)** (every repetition, shares, EXPLAIN plans).",
        "",
        "A ratio is taken per repetition between figures measured back to back in one run, given"
        f" as median (min{DASH}max) over the repetitions: a ratio inside that spread is noise."
        " The **baseline** is the design's SQL on the plain driver (`baseline.py`,"
        f" `pg_baseline.py`). *{BEYOND}*: a bar set beside the issue's.",
        "",
        *_run(r, env),
        *_overview(targets(r)),
    ]
    for key, (_, section) in REPORTS.items():
        if key in r:
            lines += section(r[key])
    lines += findings(r)
    lines += NOTES
    return "\n".join(lines).rstrip() + "\n"


def findings(r: dict[str, Any]) -> list[str]:
    """What the figures say about the misses, computed from this run's figures."""
    out = ["## What the figures say", ""]
    if "w1" in r:
        p = r["w1"]["pages"]
        h, b = (p[i]["claim"] + p[i]["ack"] for i in (HAREL, BASE))
        out.append(
            f"- **Drain against the baseline.** harel_sa writes {h:.1f} WAL pages a message to"
            f" the baseline's {b:.1f} (its one extra index is partial); what remains is the"
            " Python layer: validation, the fencing token, the `Lease`, a lock per call."
        )
    if "w4" in r:
        w = r["w4"]
        hops = 2 * med(w["hop"]) * med(w["NORMAL"]["sync"])
        out.append(
            "- **Async at NORMAL.** The two thread hops an async claim+ack makes (a no-op hop"
            f" each) take {hops:.2f}{X} the time of a whole sync claim+ack at NORMAL, so the"
            f" async twin can reach at most about {1 / (1 + hops):.2f}{X} the sync throughput;"
            " at FULL the fsync dominates. `ack_and_claim` halves the hops."
        )
    if "w3" in r:
        out.append(
            "- **Fairness.** SQLite's busy handler sleeps between tries while a worker that has"
            " just committed begins its next transaction at once, so one process takes nearly"
            " all (`plain`). Waiting in the kernel (`flock`) helps; handing the lock on"
            " (`handoff`) makes the shares equal at a wake-up per transaction; with work"
            " between the calls (`pause`) SQLite's own handler shares it."
        )
    if "cpu" in r:
        out.append(one_cpu.says(r["cpu"]))
    if "w5" in r:
        out.append(
            "- **A second writer in the same file** gets the same unfair lock: keep the queue in"
            " a file of its own."
        )
    if "pg" in r:
        out.append(pg_bench.says(r["pg"]))
    return [*out, ""]


NOTES = [
    "## Notes on method",
    "",
    "- Real files on disk, and a throw-away PostgreSQL, in a fresh temporary directory per run.",
    "- The machine is shared (other jobs compete for its cores and disk): absolute figures drift"
    " between repetitions, so read the ratios. Setup (building backlogs) runs at"
    " synchronous=NORMAL; measurements at the durability each figure names.",
    "- No test asserts a timing: benchmarks live only in `bench/`.",
]

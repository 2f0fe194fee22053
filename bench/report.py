"""RESULTS.md, a summary of one run's results: the command and the run, then one short section
per workload with its headline figures as ratios against the baseline and the peers measured
in the same run, each with its spread over the repetitions, and the targets. The raw figures
stay in results.json; the plots are drawn by :mod:`charts`."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import ab
import batches
import cli_start
import failover
import flow
import harel_peer
import mechanisms
import one_cpu
import outbox
import pg_bench
import pg_pooler
import pg_profile
import pressure
import scheduling
import upgrade_locks
import wal
from charts import BACKLOG_PNG, PROCESSES_PNG
from common import (
    BASE,
    BEYOND,
    DASH,
    HAREL,
    MET,
    MISSED,
    Row,
    X,
    fmt_ratio,
    med,
    ratios,
    summary,
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
    pages = " vs the baseline's ".join(f"{p[i]['claim'] + p[i]['ack']:.1f}" for i in (HAREL, BASE))
    rows.append(("WAL pages a message, claim + ack (counted)", pages, ""))
    return summary(
        "1. Publish, then drain",
        f"{w['n']:,} messages over {w['groups']} groups published one call each, then drained"
        " by one worker (claim + ack).",
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
    each = "; ".join(
        f"{label} {fmt_ratio(ratios(x[BASE], x[HAREL]))}" for label, x in w["claim_full"].items()
    )
    rows = [("Claim, baseline ÷ harel_sa", each, "")]
    return summary(
        "2. Claim cost against backlog",
        "Time of a claim (FULL) at each backlog, kept by an untimed `nack(0)`.",
        [*w2_targets(w), *rows],
        f"![claim cost against backlog]({BACKLOG_PNG})",
    )


def _w3_rows(w: dict[str, Any]) -> dict[str, Row]:
    """Per variant: the most processes ÷ 1, Jain's index, the refusals;
    ``plain`` judged: fair, or not (reported: no bar)."""
    most, rows = str(w["procs"][-1]), {}
    for v, per in w["variants"].items():
        m = per[most]
        refusals = sum(m["refusals"])
        figures = f"{fmt_ratio(ratios(m['rate'], per['1']['rate']))}; Jain {med(m['jain']):.2f}" + (
            f"; {refusals:,} refusals" if refusals else ""
        )
        fair = "fair" if all(med(per[c]["jain"]) >= 0.9 for c in per) else "**not fair**"
        rows[v] = (f"`{v}`", figures, f"reported; {fair}" if v == "plain" else "")
    return rows


def w3_targets(w: dict[str, Any]) -> list[Row]:
    plain = _w3_rows(w).get("plain")
    return [] if plain is None else [("Several processes, `plain`: fair?", *plain[1:])]


def w3_section(w: dict[str, Any]) -> list[str]:
    return summary(
        "3. Worker processes draining one file",
        f"{w['n']:,} messages over {w['groups']} groups drained by"
        f" {', '.join(map(str, w['procs']))} processes (FULL). Per variant (`bench/procs.py`):"
        f" {w['procs'][-1]} processes ÷ 1, Jain's index (median; 1 fair, 1/n when one did all),"
        " refusals (lock waits that ended in BusyError).",
        list(_w3_rows(w).values()),
        f"![throughput and fairness against worker processes]({PROCESSES_PNG})",
    )


def w4_targets(w: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for sync in ("FULL", "NORMAL"):
        x = ratios(w[sync]["async"], w[sync]["sync"])
        rows.append(
            (f"Async twin ≥ 0.5{X} sync (claim+ack, {sync})", fmt_ratio(x), verdict(med(x) >= 0.5))
        )
    return rows


def w4_section(w: dict[str, Any]) -> list[str]:
    rows = [
        (
            f"ack_and_claim ({sync}), async ÷ sync",
            fmt_ratio(ratios(x["async fused"], x["sync fused"])),
            "",
        )
        for sync in ("FULL", "NORMAL")
        for x in [w[sync]]
    ]
    return summary(
        "4. The async twin against the sync transport",
        f"{w['n']:,} messages over {w['groups']} groups drained by one worker: the sync"
        " transport or one coroutine on the async twin.",
        [*w4_targets(w), *rows],
    )


def w5_section(w: dict[str, Any]) -> list[str]:
    rows = []
    for name, per in w["writers"].items():
        same, own = per["same file"], per["own file"]
        rows.append(
            (
                f"Writer {name}: the queue's msgs/s, same file ÷ own",
                f"{fmt_ratio(ratios(same['queue'], own['queue']))}; the writer's"
                f" {fmt_ratio(ratios(same['writer'], own['writer']))};"
                f" {sum(same['refusals'])} refusals",
                "",
            )
        )
    return summary(
        "5. A busy second writer in the same file",
        f"For {w['window']:g} s the queue works (claim+ack, FULL) while another process commits"
        " one-row transactions to a table of its own, in the queue's file or its own file.",
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
        f"{w['ready']:,} ready groups behind {w['parked']:,} parked ones (`nack(delay=3600)`),"
        " or of priority 0 under `claim(min_priority=2)`; measured as in workload 2.",
        w6_targets(w),
    )


def fast_targets(w: dict[str, Any]) -> list[Row]:
    p, f = w["publish"]["FULL"], w["fused"]["FULL"]
    x, y = ratios(p["calls"], p["many"]), ratios(f["fused"], f["separate"])
    n = f"{w['batch']:,}"
    return [
        (
            f"publish_many of {n} ≥ 10{X} {n} publish calls (FULL)",
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
        ("publish_many speed-up (NORMAL)", fmt_ratio(ratios(p["calls"], p["many"])), ""),
        ("ack_and_claim ÷ separate (NORMAL)", fmt_ratio(ratios(f["fused"], f["separate"])), ""),
    ]
    return summary(
        "Fast paths: `publish_many` and fused `ack_and_claim`",
        f"`publish_many` of {w['batch']:,} messages against as many `publish` calls; a drain"
        " by `claim` then `ack` (two transactions a message) or `ack_and_claim` (one).",
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
    "scheduling": (scheduling.targets, scheduling.section),
    "flow": (flow.targets, flow.section),
    "start": (cli_start.targets, cli_start.section),
    "failover": (failover.targets, failover.section),
    "mechanisms": (mechanisms.targets, mechanisms.section),
    "ab": (ab.targets, ab.section),
    "pressure": (pressure.targets, pressure.section),
    "pgprofile": (lambda w: [], pg_profile.section),
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
VERSIONS = (
    "Python",
    "SQLite",
    "SQLAlchemy",
    "Alembic",
    "pydantic",
    "aiosqlite",
    "harel (the engine)",
)
LOAD = "load average (1 min) at "


def _measured_by(r: dict[str, Any], env: dict[str, str]) -> list[list[str]]:
    """Which run measured each workload's figures last: [workloads, command and commit]."""
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
    return [[", ".join(names), _short(how)] for how, names in by.items()]


def _short(how: str) -> str:
    """A run's command and commit, as run.py wrote it, without the interpreter, the package's
    version and the date (results.json has it)."""
    how = re.sub(r"\S*python\S* bench/run\.py", "bench/run.py", how)
    how = re.sub(r" at [\d.]+ at ", " at ", how).replace("(R)", "").replace(" --out bench", "")
    how = re.sub(r" on [^,]*Processor, \d+ cores", "", how)  # the machine: in results.json
    how = re.sub(r", \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \w+$", "", how)
    # The command's own words only: every rerun is run.py's --merge (the column's head says so).
    how = re.sub(r"bench/run\.py ?", "", how).replace(" --merge", "").lstrip("`")
    how = how.replace("`", "").replace("(harel_sa/ has uncommitted changes)", "(uncommitted)")
    how = re.sub(r"HAREL_SA_AB_BASE=\S+ ", "", how.replace("--only ", ""))
    return re.sub(r"^(.*?) at ", lambda m: f"{m[1] or '(all)'} at ", how)


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
        f"The first run: {env['CPU']}, {env['OS'].split(' (')[0]}; {versions};"
        f" {env.get('repetitions', '?')} repetitions, sizes {env.get('sizes', '?')}, load"
        f" average {load or '?'}."
        + (f" Also in results.json's env: {'; '.join(others)}." if others else ""),
        "",
        "Measured last by `bench/run.py --merge --only`: "
        + "; ".join(
            how if how.split(" ")[0].replace(",", ", ") == names else f"{names}: {how}"
            for names, how in _measured_by(r, env)
        )
        + ".",
        "",
    ]


def _overview(rows: list[Row]) -> list[str]:
    met = [r for r in rows if r[2].startswith(MET)]
    missed = Counter(r[0].split("]")[0] + "]" for r in rows if r[2].startswith(MISSED))
    where = ", ".join(f"{key} {n}" for key, n in missed.items()) or "none"
    return [
        "## Targets",
        "",
        f"{len(met)} met, {sum(missed.values())} not met ({where}: marked in their sections),"
        f" {len(rows) - len(met) - sum(missed.values())} reported without a bar.",
        "",
    ]


def render(r: dict[str, Any], env: dict[str, str]) -> str:
    lines = [
        "# harel_sa benchmarks",
        "",
        "By `bench/run.py` (`--only W --merge`: one workload; `--render`: this file); raw"
        " figures: [results.json](results.json). A ratio: per repetition, of figures measured"
        f" back to back, median (min{DASH}max); within the spread is noise. **baseline**: the"
        f" design's SQL on the plain driver. *{BEYOND}*: a bar beside the issue's.",
        "",
        *_run(r, env),
        *_overview(targets(r)),
    ]
    for key, (_, section) in REPORTS.items():
        if key in r:
            lines += section(r[key])
    lines += findings(r)
    return "\n".join(lines).rstrip() + "\n"


def findings(r: dict[str, Any]) -> list[str]:
    """What the figures say about the misses, computed from this run's figures."""
    out = ["## What the figures say", ""]
    if "w4" in r:
        w = r["w4"]
        hops = 2 * med(w["hop"]) * med(w["NORMAL"]["sync"])
        out.append(
            f"- **Async at NORMAL.** Two no-op thread hops take {hops:.2f}{X} a whole sync"
            " claim+ack at NORMAL: the async twin can reach at most about"
            f" {1 / (1 + hops):.2f}{X} the sync throughput."
        )
    if "w3" in r:
        out.append(
            "- **Fairness.** SQLite's busy handler sleeps while the committer begins again: one"
            " process takes nearly all (`plain`); `handoff` shares the lock."
        )
    if "pg" in r:
        out.append(pg_bench.says(r["pg"]))
    return [*out, ""]

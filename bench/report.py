"""RESULTS.md and the plots, from one run's results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import batches
import charts
import harel_peer
import one_cpu
import outbox
import pg_bench
import pg_pooler
import upgrade_locks
import wal
from common import BASE, DASH, HAREL, X, fmt, fmt_ratio, med, ratios
from procs import VARIANTS
from workloads import METRIC_LABELS, METRICS

US = 1e6  # seconds -> microseconds


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**NOT met**"


# --- targets ---------------------------------------------------------------------------------


def targets(r: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(target, figures, verdict) for each target of issues 6, 3, 12 and 15 that this run
    measured."""
    rows: list[tuple[str, str, str]] = []
    if "w1" in r:
        x = ratios(r["w1"]["FULL"]["drain"][HAREL], r["w1"]["FULL"]["drain"][BASE])
        rows.append(
            (
                f"Drain (claim+ack, FULL) ≥ 0.9{X} baseline",
                f"{fmt(r['w1']['FULL']['drain'][HAREL])} vs {fmt(r['w1']['FULL']['drain'][BASE])}"
                f" msgs/s: {fmt_ratio(x)}",
                verdict(med(x) >= 0.9),
            )
        )
    if "w2" in r:
        cases = [c["label"] for c in r["w2"]["cases"]]
        ref = cases[0]
        for label in cases[1:]:
            if label == "10k":
                continue
            x = ratios(r["w2"]["claim_full"][label][HAREL], r["w2"]["claim_full"][ref][HAREL])
            s = ratios(r["w2"]["select"][label][HAREL], r["w2"]["select"][ref][HAREL])
            rows.append(
                (
                    f"Claim at {label} ≤ 1.5{X} claim at {ref}",
                    f"{fmt(r['w2']['claim_full'][label][HAREL], US)} vs "
                    f"{fmt(r['w2']['claim_full'][ref][HAREL], US)} µs: {fmt_ratio(x)} "
                    f"(the SELECT alone: {fmt_ratio(s)})",
                    verdict(med(x) <= 1.5),
                )
            )
    if "fast" in r:
        p = r["fast"]["publish"]["FULL"]
        x = ratios(p["calls"], p["many"])
        rows.append(
            (
                f"publish_many of {r['fast']['batch']:,} ≥ 10{X} "
                f"{r['fast']['batch']:,} publish calls",
                f"{fmt(p['calls'], 1e3)} ms vs {fmt(p['many'], 1e3)} ms: {fmt_ratio(x)}",
                verdict(med(x) >= 10),
            )
        )
        f = r["fast"]["fused"]["FULL"]
        x = ratios(f["fused"], f["separate"])
        rows.append(
            (
                f"Fused ack_and_claim ≥ 1.5{X} separate ack + claim",
                f"{fmt(f['fused'])} vs {fmt(f['separate'])} msgs/s: {fmt_ratio(x)}",
                verdict(med(x) >= 1.5),
            )
        )
    if "w6" in r:
        cases = [c["label"] for c in r["w6"]["cases"]]
        ref = cases[0]
        for label in cases[1:]:
            x = ratios(r["w6"]["claim_full"][label][HAREL], r["w6"]["claim_full"][ref][HAREL])
            b = ratios(r["w6"]["claim_full"][label][BASE], r["w6"]["claim_full"][ref][BASE])
            rows.append(
                (
                    f"Claim {label} ≤ 3{X} a plain claim",
                    f"{fmt(r['w6']['claim_full'][label][HAREL], US)} vs "
                    f"{fmt(r['w6']['claim_full'][ref][HAREL], US)} µs: {fmt_ratio(x)} "
                    f"(baseline: {fmt_ratio(b)})",
                    verdict(med(x) <= 3),
                )
            )
    if "w3" in r and "plain" in r["w3"]["variants"]:
        v = r["w3"]["variants"]["plain"]
        biggest = {c: [s[0] for s in v[c]["shares"]] for c in v}
        figs = "; ".join(
            f"{c} processes: busiest did {fmt(biggest[c], 100)} %, Jain {fmt(v[c]['jain'])}"
            for c in v
            if c != "1"
        )
        fair = all(med(v[c]["jain"]) >= 0.9 for c in v)
        rows.append(
            (
                "Several processes: each one's share (and fair?)",
                figs,
                "reported; " + ("fair" if fair else "**not fair**") + " (see workload 3)",
            )
        )
    if "w7" in r:
        name, figs, ok = wal.target(r["w7"])
        rows.append((name, figs, verdict(ok)))
    if "w4" in r:
        for sync in ("FULL", "NORMAL"):
            a = r["w4"][sync]
            x = ratios(a["async"], a["sync"])
            rows.append(
                (
                    f"Async twin ≥ 0.5{X} sync (claim+ack, {sync})",
                    f"{fmt(a['async'])} vs {fmt(a['sync'])} msgs/s: {fmt_ratio(x)}",
                    verdict(med(x) >= 0.5),
                )
            )
    if "batch" in r:
        rows += batches.targets(r["batch"])
    if "cpu" in r:
        rows += one_cpu.targets(r["cpu"])
    if "harel" in r:
        rows += harel_peer.targets(r["harel"])
    if "pg" in r:
        rows += pg_bench.targets(r["pg"])
    if "pooler" in r:
        rows += pg_pooler.targets(r["pooler"])
    return rows


# --- sections --------------------------------------------------------------------------------


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def section_w1(w: dict[str, Any]) -> list[str]:
    rows = []
    for sync in ("FULL", "NORMAL"):
        for phase in ("publish", "drain"):
            h, b = w[sync][phase][HAREL], w[sync][phase][BASE]
            rows.append([f"{phase} ({sync})", fmt(h), fmt(b), fmt_ratio(ratios(h, b))])
    return [
        "## 1. Publish, then drain",
        "",
        f"{w['n']:,} messages over {w['groups']} groups, one `publish` call each, then drained by"
        " one worker with `claim` + `ack` until the queue is empty. msgs/s, higher is better.",
        "",
        *_table(["phase", "harel_sa msgs/s", "baseline msgs/s", "harel_sa / baseline"], rows),
        "",
        "Pages written to the WAL per operation (what each commit writes, and at FULL fsyncs;"
        " counted, not timed), for a group of priority 0 without a routing key:",
        "",
        *_table(
            ["", "harel_sa", "baseline"],
            [
                [op, f"{w['pages'][HAREL][op]:.1f}", f"{w['pages'][BASE][op]:.1f}"]
                for op in ("claim", "ack")
            ],
        ),
    ]


def _cost_tables(w: dict[str, Any], ref_label: str) -> list[str]:
    out: list[str] = []
    for metric in METRICS:
        rows = []
        for c in w["cases"]:
            label = c["label"]
            h, b = w[metric][label][HAREL], w[metric][label][BASE]
            hr = ratios(h, w[metric][ref_label][HAREL])
            br = ratios(b, w[metric][ref_label][BASE])
            rows.append(
                [
                    label,
                    fmt(h, US),
                    fmt_ratio(hr),
                    fmt(b, US),
                    fmt_ratio(br),
                    fmt_ratio(ratios(b, h)),
                ]
            )
        out += [
            "",
            f"**{METRIC_LABELS[metric]}** — µs per claim, lower is better",
            "",
            *_table(
                [
                    "case",
                    "harel_sa µs",
                    f"harel_sa ÷ its {ref_label}",
                    "baseline µs",
                    f"baseline ÷ its {ref_label}",
                    "baseline ÷ harel_sa",
                ],
                rows,
            ),
        ]
    return out


def section_w2(w: dict[str, Any]) -> list[str]:
    return [
        "## 2. Claim cost against backlog",
        "",
        "Each case's file is built once per implementation, then measured in every repetition."
        " The state is kept steady: each timed `claim` is followed by an untimed `nack(0)`, which"
        " frees the message (the group moves to the back of the rotation, as after a claim), so"
        " the backlog is the same for every claim measured. A figure is the median time of one"
        " claim within a repetition (up to 400 claims, or as many as fit in"
        f" 0.5{DASH}0.8 s); then the median (min{DASH}max) over repetitions. Three views:"
        " the claim at the default durability (its commit fsyncs the WAL), at NORMAL (a cheap"
        " commit: the query's cost shows), and the claim's SELECT alone, run as a read (the"
        " walk itself).",
        "",
        "![claim cost against backlog](claim_vs_backlog.png)",
        *_cost_tables(w, w["cases"][0]["label"]),
    ]


def section_w6(w: dict[str, Any]) -> list[str]:
    return [
        "## 6. Claims behind parked and lower-priority groups",
        "",
        f"{w['ready']:,} ready groups of one message in each file. *Plain claim*: nothing else."
        f" *Behind parked*: {w['parked']:,} more groups, each built through the queue's own API"
        " (publish, claim, `nack(delay=3600)`), parked before the ready groups were first"
        " claimed — the steady state of a live queue with suspended groups. *min_priority=2*:"
        f" {w['parked']:,} groups of priority 0 plus the ready groups at priority 2, claimed with"
        " `claim(min_priority=2)`. Measured as in workload 2 (claim, untimed `nack(0)`).",
        "",
        *_cost_tables(w, w["cases"][0]["label"]),
    ]


def section_w3(w: dict[str, Any]) -> list[str]:
    rows = []
    for v, per in w["variants"].items():
        base_rate = per["1"]["rate"]
        for c in (str(c) for c in w["procs"]):
            shares = "; ".join(
                "/".join(f"{s * 100:.0f}" for s in rep_shares) for rep_shares in per[c]["shares"]
            )
            rows.append(
                [
                    v,
                    c,
                    fmt(per[c]["rate"]),
                    fmt_ratio(ratios(per[c]["rate"], base_rate)),
                    shares,
                    fmt(per[c]["jain"]),
                    str(sum(per[c]["refusals"])),
                ]
            )
    legend = [f"- `{v}`: {VARIANTS[v]}" for v in w["variants"]]
    return [
        "## 3. Worker processes draining one file",
        "",
        f"{w['n']:,} messages over {w['groups']} groups, drained by 1, 2 or 4 processes"
        " (`spawn`ed, each with its own connection, released together by a barrier) with"
        " synchronous=FULL. Total msgs/s is messages over the time from the barrier to the last"
        " ack. Shares: each process's part of the messages, busiest first, one entry per"
        " repetition. Jain's index is 1 when every process did the same work and 1/n when one"
        " did all of it. *Refusals*: operations refused for the lock — for every variant but"
        " `retry` each one is a **5-second wait that ended in BusyError** (SQLite's busy handler"
        f" gave up); for `retry` they are immediate refusals, retried after 50{DASH}250 µs.",
        "",
        *legend,
        "",
        "![throughput and fairness against worker processes](processes.png)",
        "",
        *_table(
            [
                "variant",
                "processes",
                "total msgs/s",
                "÷ 1 process",
                "shares % (per repetition)",
                "Jain index",
                "refusals",
            ],
            rows,
        ),
    ]


def section_w4(w: dict[str, Any]) -> list[str]:
    rows = []
    for sync in ("FULL", "NORMAL"):
        a = w[sync]
        rows.append(
            [
                sync,
                "claim + ack",
                fmt(a["sync"]),
                fmt(a["async"]),
                fmt_ratio(ratios(a["async"], a["sync"])),
            ]
        )
        rows.append(
            [
                sync,
                "ack_and_claim",
                fmt(a["sync fused"]),
                fmt(a["async fused"]),
                fmt_ratio(ratios(a["async fused"], a["sync fused"])),
            ]
        )
    return [
        "## 4. The async twin against the sync transport",
        "",
        f"{w['n']:,} messages over {w['groups']} groups, drained by one worker: the sync"
        " transport, or one coroutine awaiting the async twin's calls in turn; with `claim` +"
        " `ack` (the target's figure), and with `ack_and_claim` (one call per message). Each"
        " async call is one hop into aiosqlite's thread and back; a no-op hop alone costs"
        f" {fmt(w['hop'], US)} µs on this machine.",
        "",
        *_table(["synchronous", "calls", "sync msgs/s", "async msgs/s", "async / sync"], rows),
    ]


def section_w5(w: dict[str, Any]) -> list[str]:
    rows = []
    for name, per in w["writers"].items():
        for where in ("own file", "same file"):
            rows.append(
                [
                    name,
                    where,
                    fmt(per[where]["queue"]),
                    fmt(per[where]["writer"]),
                    str(sum(per[where]["refusals"])),
                ]
            )
        q = ratios(per["same file"]["queue"], per["own file"]["queue"])
        s = ratios(per["same file"]["writer"], per["own file"]["writer"])
        rows.append([name, "**same ÷ own**", fmt_ratio(q), fmt_ratio(s), ""])
    return [
        "## 5. A busy second writer in the same file",
        "",
        f"For {w['window']:g} s the queue works (claim+ack, FULL, one worker) while another"
        " process commits one-row write transactions (BEGIN IMMEDIATE, INSERT, COMMIT, FULL) on"
        " a table of its own — flat out, or pausing 1 ms after each commit — either in the"
        " queue's file or in a file of its own (same CPU and disk load, no shared lock)."
        " *Refusals*: lock waits that ended in BusyError after the busy_timeout (1 s on both"
        " sides here, to bound the run), on either side; each was retried.",
        "",
        *_table(["second writer", "its table in", "queue msgs/s", "writer tx/s", "refusals"], rows),
    ]


def section_fast(w: dict[str, Any]) -> list[str]:
    rows = []
    for sync in ("FULL", "NORMAL"):
        p = w["publish"][sync]
        rows.append(
            [
                f"{w['batch']:,} messages, {sync}",
                f"{fmt(p['calls'], 1e3)} ms",
                f"{fmt(p['many'], 1e3)} ms",
                fmt_ratio(ratios(p["calls"], p["many"])),
            ]
        )
    frows = []
    for sync in ("FULL", "NORMAL"):
        f = w["fused"][sync]
        frows.append(
            [
                sync,
                fmt(f["separate"]),
                fmt(f["fused"]),
                fmt_ratio(ratios(f["fused"], f["separate"])),
            ]
        )
    return [
        "## Fast paths: `publish_many` and fused `ack_and_claim`",
        "",
        f"`publish_many` of {w['batch']:,} messages (one transaction) against {w['batch']:,}"
        " `publish` calls, into an empty file:",
        "",
        *_table(["batch", "publish calls", "publish_many", "speed-up"], rows),
        "",
        f"Draining {w['n']:,} messages over {w['groups']} groups: `claim` then `ack` (two write"
        " transactions a message) against `ack_and_claim` (one):",
        "",
        *_table(["synchronous", "separate msgs/s", "fused msgs/s", "fused / separate"], frows),
    ]


# --- plots -----------------------------------------------------------------------------------


def plots(r: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    if "w2" in r:
        w = r["w2"]
        labels = [c["label"] for c in w["cases"]]
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        styles = {
            ("claim_full", HAREL): ("harel_sa: claim (FULL)", "C0", "o-"),
            ("claim_full", BASE): ("baseline: claim (FULL)", "C3", "o-"),
            ("select", HAREL): ("harel_sa: SELECT alone", "C0", "s--"),
            ("select", BASE): ("baseline: SELECT alone", "C3", "s--"),
        }
        for (metric, impl), (name, color, style) in styles.items():
            vals = [[v * US for v in w[metric][lab][impl]] for lab in labels]
            meds = [med(v) for v in vals]
            lo = [m - min(v) for m, v in zip(meds, vals, strict=True)]
            hi = [max(v) - m for m, v in zip(meds, vals, strict=True)]
            ax.errorbar(labels, meds, yerr=[lo, hi], fmt=style, color=color, label=name, capsize=3)
        ax.set_yscale("log")
        ax.set_ylabel(f"µs per claim (median, min{DASH}max bars)")
        ax.set_xlabel("backlog")
        ax.set_title("Claim cost against backlog")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "claim_vs_backlog.png", dpi=110)
        plt.close(fig)
        made.append("claim_vs_backlog.png")
    if "w3" in r:
        w = r["w3"]
        procs = w["procs"]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
        for i, (v, per) in enumerate(w["variants"].items()):
            vals = [per[str(c)]["rate"] for c in procs]
            meds = [med(x) for x in vals]
            lo = [m - min(x) for m, x in zip(meds, vals, strict=True)]
            hi = [max(x) - m for m, x in zip(meds, vals, strict=True)]
            a1.errorbar(procs, meds, yerr=[lo, hi], fmt="o-", color=f"C{i}", label=v, capsize=3)
            busiest = [[s[0] * 100 for s in per[str(c)]["shares"]] for c in procs]
            a2.plot(procs, [med(b) for b in busiest], "o-", color=f"C{i}", label=v)
        a2.plot(procs, [100 / c for c in procs], "k:", label="fair (100/n)")
        a1.set_xticks(procs)
        a2.set_xticks(procs)
        a1.set_xlabel("worker processes")
        a2.set_xlabel("worker processes")
        a1.set_ylabel(f"total msgs/s (median, min{DASH}max bars)")
        a2.set_ylabel("busiest process's share, % (median)")
        a1.set_title("Throughput against worker processes")
        a2.set_title("Fairness: the busiest process's share")
        a1.grid(True, alpha=0.3)
        a2.grid(True, alpha=0.3)
        a1.legend(fontsize=8)
        a2.legend(fontsize=8)
        a1.set_ylim(bottom=0)
        a2.set_ylim(0, 105)
        fig.tight_layout()
        fig.savefig(out / "processes.png", dpi=110)
        plt.close(fig)
        made.append("processes.png")
    if "batch" in r:
        made.append(charts.batch_plot(plt, r["batch"], out))
    if "pg" in r:
        made.append(charts.pg_plot(plt, r["pg"], out))
    return made


# --- the whole file --------------------------------------------------------------------------


def render(r: dict[str, Any], env: dict[str, str]) -> str:
    lines = [
        "# harel_sa benchmarks",
        "",
        "Written by `bench/run.py` — do not edit by hand; rerun it (`--render` writes it again"
        " from `results.json`, measuring nothing). Every figure is the median"
        f" (min{DASH}max) of the repetitions; each harel_sa figure stands next to the baseline"
        " measured in the same run. A ratio is taken per repetition, between figures measured"
        " back to back (the order alternates between repetitions, so drift falls on both"
        f" sides), then given as median (min{DASH}max).",
        "",
        "The **baseline** (`bench/baseline.py`) is the design's SQL on plain `sqlite3`, verbatim"
        " but for one fairness choice: its `publish` (and `ack`) run the design's two statements"
        " in one transaction, not as two autocommit statements (which would pay two fsyncs). It"
        " encodes and decodes the event with the same pydantic model as harel_sa.",
        "",
        "## Run",
        "",
        *_table(["", ""], [[k, v] for k, v in env.items()]),
        "",
        "## Targets (issues 6, 3, 12, 15 and 16)",
        "",
        *_table(
            ["target", f"figures (median (min{DASH}max))", "verdict"],
            [list(t) for t in targets(r)],
        ),
        "",
    ]
    for key, fn in (
        ("w1", section_w1),
        ("w2", section_w2),
        ("w3", section_w3),
        ("w4", section_w4),
        ("w5", section_w5),
        ("w6", section_w6),
        ("w7", wal.section),
        ("fast", section_fast),
        ("batch", batches.section),
        ("cpu", one_cpu.section),
        ("harel", harel_peer.section),
        ("pg", pg_bench.section),
        ("pooler", pg_pooler.section),
        ("upgrade", upgrade_locks.section),
        ("outbox", outbox.section),
    ):
        if key in r:
            lines += [*fn(r[key]), ""]
    lines += findings(r)
    lines += NOTES
    return "\n".join(lines).rstrip() + "\n"


def findings(r: dict[str, Any]) -> list[str]:
    """What the figures say about the misses, computed from this run's figures."""
    out = ["## What the figures say", ""]
    if "w1" in r:
        p = r["w1"]["pages"]
        h = p[HAREL]["claim"] + p[HAREL]["ack"]
        b = p[BASE]["claim"] + p[BASE]["ack"]
        out.append(
            f"- **Drain against the baseline.** A message costs harel_sa {h:.1f} WAL pages"
            f" (claim {p[HAREL]['claim']:.1f} + ack {p[HAREL]['ack']:.1f}) against the"
            f" baseline's {b:.1f}. harel_sa's one extra index, `groups_by_priority`, is partial"
            " (`WHERE priority > 0`), so claiming a priority-0 group does not write it; the"
            " in-flight check reads the group's head row (only a head is ever leased), so it"
            " needs no index of its own. What remains is the Python layer: validation, the"
            " fencing token, the `Lease`, a lock per call (about 10 µs a call under cProfile)."
        )
    if "w4" in r:
        w = r["w4"]
        hop = med(w["hop"])
        per_msg = 1 / med(w["NORMAL"]["sync"])
        ceiling = per_msg / (per_msg + 2 * hop)
        out.append(
            f"- **Async at NORMAL.** A sync claim+ack costs {per_msg * US:.0f} µs a message at"
            f" NORMAL; the async twin adds two thread hops of {hop * US:.0f} µs each (a no-op"
            " hop, measured above), so even with nothing else in the way it could reach only"
            f" about {ceiling:.2f}{X} the sync throughput. At FULL the fsync dominates and the"
            " hops matter less. `ack_and_claim` halves the hops."
        )
    if "w3" in r:
        v = r["w3"]["variants"]
        parts = []
        for name in ("plain", "baseline", "flock", "handoff", "pause"):
            if name in v and "4" in v[name]:
                parts.append(
                    f"`{name}` {fmt(v[name]['4']['jain'])} at {fmt(v[name]['4']['rate'])} msgs/s"
                )
        out.append(
            "- **Fairness.** SQLite's busy handler sleeps 1, 2, 5, 10 … up to 100 ms between"
            " tries; a worker that has just committed begins its next transaction within"
            " microseconds, so a sleeping process wakes to find the lock taken again, sleeps"
            " longer, and at worst gives up after `busy_timeout` (the *refusals*). Jain's"
            " index with 4 processes (1 = fair, 0.25 = one does all): " + "; ".join(parts) + "."
            " A process that waits in the kernel for a lock the holder lets go of (`flock`)"
            " is woken at once instead of sleeping through the next transactions, but the"
            " holder often takes the lock back before the woken process runs; passing the lock"
            " on (`handoff`: the holder steps aside while someone waits) makes the shares"
            " equal, at the price of one process wake-up per transaction. With work between"
            " the calls (`pause`) the lock is free often enough that SQLite's own handler"
            " shares it fairly, and more processes add throughput."
        )
    if "cpu" in r:
        out.append(one_cpu.says(r["cpu"]))
    if "w5" in r:
        out.append(
            "- **A second writer in the same file** gets the same unfair lock: whichever side"
            " commits back to back starves the other (see the refusals and the same ÷ own"
            " ratios). Keep the queue in a file of its own."
        )
    return [*out, ""]


NOTES = [
    "## Notes on method",
    "",
    "- Real files on disk, in a fresh temporary directory per run (removed afterwards).",
    "- The machine is shared: other processes (test runs) compete for its two cores and its"
    f" disk, and its page cache is reclaimed aggressively. Absolute figures drift by 2{X} or more"
    " between repetitions; the ratios, taken between figures measured back to back, are the"
    " figures to read. The load average at the start and end of the run is in the table above.",
    "- Setup (building backlogs) is done with synchronous=NORMAL to save time; measurement"
    " connections use the durability each figure names.",
    "- No test asserts a timing: benchmarks live only in `bench/`.",
]

"""The plots of ``RESULTS.md``, drawn from ``results.json``: a median with min-max bars per
figure. Workload 2's claim cost against backlog, workload 3's processes, the batched workloads
(issue 16) and the PostgreSQL drains (issue 15); log scales where the figures span orders of
magnitude."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import batches
from common import BASE, BATCH_PNG, DASH, HAREL, PG_PNG, med

BACKLOG_PNG, PROCESSES_PNG = "claim_vs_backlog.png", "processes.png"
US = 1e6  # seconds -> microseconds


def _bars(values: list[list[float]]) -> tuple[list[float], list[list[float]]]:
    """Medians and their (below, above) error bars."""
    meds = [med(v) for v in values]
    lo = [m - min(v) for m, v in zip(meds, values, strict=True)]
    hi = [max(v) - m for m, v in zip(meds, values, strict=True)]
    return meds, [lo, hi]


def _save(plt: Any, fig: Any, out: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def backlog_plot(plt: Any, w: dict[str, Any], out: Path) -> str:
    """µs per claim of workload 2, against backlog: the claim at FULL and its SELECT alone."""
    labels = [c["label"] for c in w["cases"]]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    styles = {
        ("claim_full", HAREL): ("harel_sa: claim (FULL)", "C0", "o-"),
        ("claim_full", BASE): ("baseline: claim (FULL)", "C3", "o-"),
        ("select", HAREL): ("harel_sa: SELECT alone", "C0", "s--"),
        ("select", BASE): ("baseline: SELECT alone", "C3", "s--"),
    }
    for (metric, impl), (name, color, style) in styles.items():
        meds, err = _bars([[v * US for v in w[metric][lab][impl]] for lab in labels])
        ax.errorbar(labels, meds, yerr=err, fmt=style, color=color, label=name, capsize=3)
    ax.set_yscale("log")
    ax.set_ylabel(f"µs per claim (median, min{DASH}max bars)")
    ax.set_xlabel("backlog")
    ax.set_title("Claim cost against backlog")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(plt, fig, out, BACKLOG_PNG)


def processes_plot(plt: Any, w: dict[str, Any], out: Path) -> str:
    """Workload 3: total msgs/s and the busiest process's share against worker processes."""
    procs = w["procs"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
    for i, (v, per) in enumerate(w["variants"].items()):
        meds, err = _bars([per[str(c)]["rate"] for c in procs])
        a1.errorbar(procs, meds, yerr=err, fmt="o-", color=f"C{i}", label=v, capsize=3)
        busiest = [[s[0] * 100 for s in per[str(c)]["shares"]] for c in procs]
        a2.plot(procs, [med(b) for b in busiest], "o-", color=f"C{i}", label=v)
    a2.plot(procs, [100 / c for c in procs], "k:", label="fair (100/n)")
    for ax in (a1, a2):
        ax.set_xticks(procs)
        ax.set_xlabel("worker processes")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    a1.set_ylabel(f"total msgs/s (median, min{DASH}max bars)")
    a2.set_ylabel("busiest process's share, % (median)")
    a1.set_title("Throughput against worker processes")
    a2.set_title("Fairness: the busiest process's share")
    a1.set_ylim(bottom=0)
    a2.set_ylim(0, 105)
    return _save(plt, fig, out, PROCESSES_PNG)


def batch_plot(plt: Any, w: dict[str, Any], out: Path) -> str:
    """msgs/s of each variant of workload "batch", at FULL and at NORMAL, side by side."""
    variants = [v for v in batches.VARIANTS if v in w[batches.SYNCS[0]]]
    fig, ax = plt.subplots(figsize=(10, 4.8))
    width = 0.8 / len(batches.SYNCS)
    for k, sync in enumerate(batches.SYNCS):
        meds, err = _bars([w[sync][v] for v in variants])
        xs = [i + (k - (len(batches.SYNCS) - 1) / 2) * width for i in range(len(variants))]
        ax.bar(xs, meds, width, yerr=err, capsize=3, color=f"C{k}", label=f"synchronous={sync}")
    ax.set_xticks(range(len(variants)), variants, rotation=20, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel(f"msgs/s (median, min{DASH}max bars)")
    ax.set_title(f"Draining {w['n']:,} messages over {w['groups']:,} groups, one worker")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(plt, fig, out, BATCH_PNG)


def pg_plot(plt: Any, w: dict[str, Any], out: Path) -> str:
    """msgs/s of each PostgreSQL queue against its worker processes."""
    d = w["drain"]
    procs = d["procs"]
    fig, ax = plt.subplots(figsize=(10.5, 4.8))
    for i, v in enumerate(d["impls"].values()):
        meds, err = _bars([v[str(c)]["rate"] for c in procs])
        style = "o-" if v["group"] else "s--"
        ax.errorbar(procs, meds, yerr=err, fmt=style, color=f"C{i}", label=v["label"], capsize=3)
    ax.set_xticks(procs)
    ax.set_yscale("log")
    ax.set_xlabel("worker processes")
    ax.set_ylabel(f"msgs/s (median, min{DASH}max bars)")
    ax.set_title(f"PostgreSQL: draining {d['n']:,} messages over {d['groups']:,} groups")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return _save(plt, fig, out, PG_PNG)


PLOTS = {"w2": backlog_plot, "w3": processes_plot, "batch": batch_plot, "pg": pg_plot}


def plots(r: dict[str, Any], out: Path) -> list[str]:
    """Every plot whose workload is in ``r``, written into ``out``: their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return [plot(plt, r[key], out) for key, plot in PLOTS.items() if key in r]

"""The charts of the batched workloads (issue 16) and of the PostgreSQL drains (issue 15),
drawn from ``results.json`` by :func:`report.plots`: a median with min-max bars per figure,
on a log scale (the variants span two orders of magnitude)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import batches
from common import BATCH_PNG, DASH, PG_PNG, med


def _bars(values: list[list[float]]) -> tuple[list[float], list[list[float]]]:
    """Medians and their (below, above) error bars."""
    meds = [med(v) for v in values]
    lo = [m - min(v) for m, v in zip(meds, values, strict=True)]
    hi = [max(v) - m for m, v in zip(meds, values, strict=True)]
    return meds, [lo, hi]


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
    fig.tight_layout()
    fig.savefig(out / BATCH_PNG, dpi=110)
    plt.close(fig)
    return BATCH_PNG


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
    fig.tight_layout()
    fig.savefig(out / PG_PNG, dpi=110)
    plt.close(fig)
    return PG_PNG

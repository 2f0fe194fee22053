"""What every workload shares: the two queues behind one interface, timing and statistics."""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from baseline import BaselineTransport

from harel_sa import Event, Names, SqliteTransport
from harel_sa.sqlite.statements import statements_for

HAREL = "harel_sa"
BASE = "baseline"
IMPLS = (HAREL, BASE)

VISIBILITY = 300.0


def event(i: int = 0) -> Event:
    """A small event, as the engine sends them (about 120 bytes of JSON)."""
    return Event(kind="bench.tick", data={"i": i, "note": "benchmark payload"})


class Queue:
    """harel_sa's :class:`SqliteTransport` or the baseline, behind the calls the workloads use.

    ``select_only`` runs the claim's SELECT alone (a read, nothing leased): the cost of the
    walk without the write transaction around it. For harel_sa it runs the transport's own
    compiled statement on the transport's own connection.
    """

    def __init__(self, impl: str, path: str | Path, synchronous: str = "FULL", **kw: Any) -> None:
        self.impl = impl
        if impl == HAREL:
            self.t: Any = SqliteTransport(str(path), synchronous=synchronous, **kw)  # type: ignore[arg-type]
            self._raw = self.t._db.raw
            self._st = statements_for(Names(self.t.prefix))
        else:
            self.t = BaselineTransport(str(path), synchronous=synchronous, **kw)

    def publish(self, group_id: str, ev: Event, priority: int = 0) -> None:
        self.t.publish(group_id, ev, priority)

    def publish_many(self, items: list[tuple[str, Event]], priority: int = 0) -> None:
        if self.impl == HAREL:
            self.t.publish_many(items, priority=priority)
        else:
            self.t.publish_many(items, priority)

    def claim(self, worker: str = "w", min_priority: int = 0) -> Any:
        return self.t.claim(worker, VISIBILITY, min_priority)

    def ack(self, lease: Any) -> None:
        self.t.ack(lease)

    def nack(self, lease: Any, delay: float = 0.0) -> None:
        self.t.nack(lease, delay)

    def select_only(self, min_priority: int = 0) -> object:
        if self.impl == BASE:
            return self.t.select_only(min_priority)
        # The claim's select binds (now, key0, ...) by position; its floor is in its text.
        sql = self._st.claim(min_priority, 0)
        return self._raw.execute(sql, (time.time(),)).fetchone()

    def close(self) -> None:
        self.t.close()


def drain(q: Queue, worker: str = "w") -> int:
    """Claim and ack until the queue is empty; how many messages."""
    n = 0
    while (lease := q.claim(worker)) is not None:
        q.ack(lease)
        n += 1
    return n


def claim_and_ack_all(t: Any) -> int:
    """Claim (for ``VISIBILITY``) and ack one message at a time until none is left; how many.
    Any transport: harel_sa's, the baseline's, harel's."""
    n = 0
    while (lease := t.claim("w", VISIBILITY)) is not None:
        t.ack(lease)
        n += 1
    return n


def per_op(
    fn: Callable[[], Any],
    after: Callable[[Any], Any] | None,
    budget: float,
    k_max: int,
    k_min: int = 20,
) -> float:
    """Median seconds of ``fn`` over up to ``k_max`` calls (at least ``k_min``, else until
    ``budget`` seconds have gone); ``after(result)`` runs untimed after each call."""
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < k_max and (len(times) < k_min or time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
        if after is not None:
            after(result)
    return statistics.median(times)


# --- statistics ------------------------------------------------------------------------------


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def ratios(a: list[float], b: list[float]) -> list[float]:
    """Per-repetition ratios a[i] / b[i] (pairs measured back to back in one repetition)."""
    return [x / y for x, y in zip(a, b, strict=True)]


def fmt_num(x: float) -> str:
    if x >= 1000:
        return f"{x:,.0f}"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


X = "\N{MULTIPLICATION SIGN}"
DASH = "\N{EN DASH}"
#: A verdict's note on a bar this project set beside an issue's own.
BEYOND = "extra"
MET, MISSED = "met", "**NOT met**"
#: The charts of bench/charts.py, as the sections that show them name them.
BATCH_PNG, PG_PNG = "batches.png", "pg_drains.png"


def fmt(xs: list[float], scale: float = 1.0) -> str:
    """``median (min-max)`` of ``xs`` times ``scale``."""
    ys = [x * scale for x in xs]
    return f"{fmt_num(med(ys))} ({fmt_num(min(ys))}{DASH}{fmt_num(max(ys))})"


def fmt_ratio(xs: list[float]) -> str:
    return f"{fmt_num(med(xs))}{X} ({fmt_num(min(xs))}{DASH}{fmt_num(max(xs))})"


# --- the summary (RESULTS.md) ----------------------------------------------------------------

#: One row of a workload's summary: (the figure, or a target with its bar; its value, a ratio
#: with its spread where the run has one; the verdict, or "" for a figure without a bar).
Row = tuple[str, str, str]


def verdict(ok: bool, beyond: bool = False) -> str:
    """``met`` or ``**NOT met**``; ``beyond``: a bar this project set beside the issue's."""
    said = MET if ok else MISSED
    return f"{said} ({BEYOND})" if beyond else said


def table(head: list[str], rows: list[list[str]] | list[Row]) -> list[str]:
    """A Markdown table's lines."""
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return out + ["| " + " | ".join(row) + " |" for row in rows]


def summary(
    title: str, what: str, rows: list[Row], *more: str, head: Row | None = None
) -> list[str]:
    """A workload's summary: its heading, what it measures, its figures and targets (or the
    table ``head`` names), notes."""
    out = [f"## {title}", "", what, ""]
    if rows:
        out += [*table(list(head or ("", "", "")), rows), ""]
    for line in more:
        out += [line, ""]
    return out


# --- runs ------------------------------------------------------------------------------------


@dataclass
class Config:
    quick: bool
    reps: int
    workdir: Path
    log: Callable[[str], None] = print
    counter: list[int] = field(default_factory=lambda: [0])

    def fresh(self, name: str) -> Path:
        """A new directory for one database file (real files on disk, under the run's temp)."""
        self.counter[0] += 1
        d = self.workdir / f"{self.counter[0]:04d}-{name}"
        d.mkdir(parents=True)
        return d / "queue.db"

    def size(self, quick: int, full: int) -> int:
        return quick if self.quick else full


def remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{path}{suffix}")


@contextlib.contextmanager
def opened(impl: str, path: Path, synchronous: str = "FULL", **kw: Any) -> Iterator[Queue]:
    q = Queue(impl, path, synchronous, **kw)
    try:
        yield q
    finally:
        q.close()


def order(rep: int) -> tuple[str, str]:
    """Which implementation goes first in repetition ``rep``: alternated, so drift is shared."""
    return IMPLS if rep % 2 == 0 else (IMPLS[1], IMPLS[0])

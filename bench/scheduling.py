"""Scheduled and keyed messages (issue 44): what they cost a claim and a publish.

    .venv/bin/python bench/run.py --only scheduling --merge   # the workload, into RESULTS.md
    .venv/bin/python bench/scheduling.py sqlite|postgresql [URL] [--normal] [--plain-only]

A claim+ack over a backlog of N messages in GROUPS groups, on a queue with no scheduled message
and on one that also holds FAR far-future ones (due in a year), the two in alternating order;
and N publishes of each kind on one queue, in a rotating order: plain, scheduled (``delay``),
keyed (``keep``, a new key each: it writes) and a replace (``on_key="replace"`` of a waiting
scheduled keyed message: a debounce). Each ratio is per round, between figures measured back to
back. SQLite at synchronous FULL and NORMAL (a file each), PostgreSQL on a throw-away cluster.
On SQLite the same round also times the two publishes as hand-written SQL on plain ``sqlite3``
(:func:`_driver`): the ratio a keyed publish costs before any of harel_sa's code.

Run alone it prints one JSON line of per-operation medians (µs) and ratios, for one backend
(``--normal``: SQLite at NORMAL; ``--plain-only``: the plain claim+ack and publish alone, only
the calls every release has, for an A/B against an older checkout on ``PYTHONPATH``).
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import Config, Row, X, fmt_ratio, med, summary, verdict
from pg_server import Server

from harel_sa import Event, PostgresTransport, SqliteTransport

GROUPS = 200
#: The kinds of publish measured; each ratio is against ``plain``.
PUBLISHES = ("plain", "scheduled", "keyed", "replace")
#: The issue's bars: a scheduled or keyed publish, and a claim beside far-future messages.
PUBLISH_LIMIT, CLAIM_LIMIT = 1.3, 1.2
EVENT = Event(kind="x")


def claim_acks(q: Any, n: int) -> float:
    """µs per claim+ack over a backlog of ``n`` messages (published untimed first)."""
    q.publish_many([(f"g{i % GROUPS}", EVENT) for i in range(n)])
    start = time.perf_counter()
    for _ in range(n):
        q.ack(q.claim("w", 30.0))
    return (time.perf_counter() - start) / n * 1e6


def _publisher(q: Any, kind: str) -> Callable[[int, int], None]:
    """``publish(i, round)``: the ``i``-th publish of ``kind`` in a round."""
    if kind == "plain":
        return lambda i, r: q.publish(f"g{i % GROUPS}", EVENT)
    if kind == "scheduled":
        return lambda i, r: q.publish(f"g{i % GROUPS}", EVENT, delay=3600.0)
    if kind == "keyed":
        return lambda i, r: q.publish(f"g{i % GROUPS}", EVENT, key=f"k{r}-{i}")
    for i in range(GROUPS):  # the waiting messages the replaces act on
        q.publish(f"g{i}", EVENT, key=f"d{i}", delay=3600.0)
    return lambda i, r: q.publish(
        f"g{i % GROUPS}", EVENT, key=f"d{i % GROUPS}", on_key="replace", delay=3600.0
    )


def _fill_far(q: Any, far: int) -> None:
    for i in range(0, far, 10_000):
        chunk = range(i, min(i + 10_000, far))
        q.publish_many([(f"f{j % GROUPS}", EVENT) for j in chunk], delay=365 * 86400.0)


def _driver(path: Path, sync: str, prefix: str) -> dict[str, Callable[[int, int], None]]:
    """Plain and keyed (``keep``, a new key each) publishes as hand-written SQL on a plain
    ``sqlite3`` connection to ``prefix``'s tables in ``path``: the floor of the keyed ratio."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA synchronous={sync}")
    m, s, g = (f"{prefix}_transport_{t}" for t in ("messages", "scheduled", "groups"))
    group = f"INSERT OR IGNORE INTO {g} (group_id, priority, routing_key) VALUES (?, 0, NULL)"
    plain = f"INSERT INTO {m} (group_id, event, enqueued_at) VALUES (?, ?, ?)"
    keyed = (
        f"INSERT INTO {m} (group_id, event, enqueued_at, message_key) SELECT ?1, ?2, ?3, ?4 "
        f"WHERE NOT EXISTS (SELECT 1 FROM {m} WHERE message_key = ?4 AND locked_by IS NULL) "
        f"AND NOT EXISTS (SELECT 1 FROM {s} WHERE message_key = ?4)"
    )

    def publish(sql: str, key: Callable[[int, int], tuple[str, ...]]) -> Callable[[int, int], None]:
        def one(i: int, r: int) -> None:
            gid = f"g{i % GROUPS}"
            conn.execute("BEGIN IMMEDIATE")
            if conn.execute(sql, (gid, EVENT.model_dump_json(), time.time(), *key(i, r))).rowcount:
                conn.execute(group, (gid,))
            conn.execute("COMMIT")

        return one

    return {
        "driver_plain": publish(plain, lambda i, r: ()),
        "driver_keyed": publish(keyed, lambda i, r: (f"s{r}-{i}",)),
    }


def measure(
    opener: Callable[[], Any],
    n: int,
    far: int,
    rounds: int,
    plain_only: bool = False,
    driver: tuple[Path, str] | None = None,
) -> dict[str, list[float]]:
    """Per round: µs per claim+ack without and with ``far`` far-future messages (two queues
    ``opener`` gives) and per publish of each kind; and the ratios (with ``driver``, a SQLite
    file and its ``synchronous``, its publishes on plain ``sqlite3`` too: :func:`_driver`)."""
    out: dict[str, list[float]] = {}
    with opener() as plain_q, opener() as far_q:
        if not plain_only:
            _fill_far(far_q, far)
        queues = [("claim", plain_q)] + ([] if plain_only else [("claim_far", far_q)])
        kinds = PUBLISHES[:1] if plain_only else PUBLISHES
        publishers = {kind: _publisher(plain_q, kind) for kind in kinds}
        if driver is not None:
            publishers.update(_driver(*driver, plain_q.prefix))
        kinds = tuple(publishers)
        for r in range(rounds):
            for name, q in queues if r % 2 == 0 else queues[::-1]:
                out.setdefault(name, []).append(claim_acks(q, n))
            turn = kinds[r % len(kinds) :] + kinds[: r % len(kinds)]
            for kind in turn:
                start = time.perf_counter()
                for i in range(n):
                    publishers[kind](i, r)
                out.setdefault(kind, []).append((time.perf_counter() - start) / n * 1e6)
    if not plain_only:
        out["ratio_claim"] = [a / b for a, b in zip(out["claim_far"], out["claim"], strict=True)]
        for kind in PUBLISHES[1:]:
            out[f"ratio_{kind}"] = [a / b for a, b in zip(out[kind], out["plain"], strict=True)]
    if driver is not None:
        keyed, plain = out["driver_keyed"], out["driver_plain"]
        out["ratio_driver_keyed"] = [a / b for a, b in zip(keyed, plain, strict=True)]
    return out


def _sqlite(path: Path, sync: str) -> Callable[[], Any]:
    """Opens a transport of another prefix on ``path`` at each call."""
    made = iter(range(10**6))
    return lambda: SqliteTransport(str(path), synchronous=sync, prefix=f"q{next(made)}")  # type: ignore[arg-type]


def _postgres(url: str) -> Callable[[], Any]:
    made = iter(range(10**6))
    return lambda: PostgresTransport(url, prefix=f"q{next(made)}")


def run(cfg: Config) -> dict[str, Any]:
    """The workload of ``bench/run.py``: SQLite FULL and NORMAL, then PostgreSQL."""
    n, far = cfg.size(300, 2_000), cfg.size(10_000, 100_000)
    out: dict[str, Any] = {"n": n, "far": far, "groups": GROUPS}
    for sync in ("FULL", "NORMAL"):
        path = cfg.fresh(f"sched-{sync}")
        out[f"sqlite {sync}"] = measure(_sqlite(path, sync), n, far, cfg.reps, driver=(path, sync))
        cfg.log(f"  scheduling sqlite {sync} done")
    server = Server(cfg.workdir)
    try:
        out["postgresql"] = measure(_postgres(server.database()), n, far, cfg.reps)
    finally:
        server.stop()
    cfg.log("  scheduling postgresql done")
    return out


BACKENDS = {"sqlite FULL": "SQLite FULL", "sqlite NORMAL": "SQLite NORMAL", "postgresql": "PG"}


def targets(w: dict[str, Any]) -> list[Row]:
    rows = []
    far = f"{w['far'] // 1000}k" if w["far"] >= 1000 else str(w["far"])
    for backend, shown in BACKENDS.items():
        b = w[backend]
        for kind in ("scheduled", "keyed"):
            ratio = b[f"ratio_{kind}"]
            rows.append(
                (
                    f"{kind} ÷ plain publish, {shown}, ≤ {PUBLISH_LIMIT}{X}",
                    fmt_ratio(ratio),
                    verdict(med(ratio) <= PUBLISH_LIMIT),
                )
            )
        ratio = b["ratio_claim"]
        rows.append(
            (
                f"claim+ack beside {far} far-future ÷ none, {shown}, ≤ {CLAIM_LIMIT}{X}",
                fmt_ratio(ratio),
                verdict(med(ratio) <= CLAIM_LIMIT),
            )
        )
    replaces = ", ".join(f"{v} {med(w[k]['ratio_replace']):.2f}{X}" for k, v in BACKENDS.items())
    return [*rows, ("replace (debounce) ÷ plain publish", replaces, "")]


def section(w: dict[str, Any]) -> list[str]:
    """A compact table: a row per bar, a column per backend (:func:`targets` lists them)."""
    rows = []
    for label, key, limit in (
        (f"scheduled ÷ plain publish ≤ {PUBLISH_LIMIT}{X}", "ratio_scheduled", PUBLISH_LIMIT),
        (f"keyed ÷ plain publish ≤ {PUBLISH_LIMIT}{X}", "ratio_keyed", PUBLISH_LIMIT),
        (f"claim+ack, far-future ÷ none ≤ {CLAIM_LIMIT}{X}", "ratio_claim", CLAIM_LIMIT),
        ("replace ÷ plain publish", "ratio_replace", None),
    ):
        cells = [fmt_ratio(w[b][key]) if limit else f"{med(w[b][key]):.2f}{X}" for b in BACKENDS]
        if limit is not None:
            cells = [
                f"{c} {verdict(med(w[b][key]) <= limit)}"
                for c, b in zip(cells, BACKENDS, strict=True)
            ]
        rows.append([label, *cells])
    driver = [fmt_ratio(w[b]["ratio_driver_keyed"]) if b != "postgresql" else "" for b in BACKENDS]
    rows.append(["keyed ÷ plain on plain sqlite3", *driver])
    plain = ", ".join(f"{v} {med(w[k]['plain']):.0f}" for k, v in BACKENDS.items())
    return summary(
        "Scheduled and keyed messages (issue 44)",
        f"{w['n']:,} claim+acks beside none or {w['far']:,} far-future messages; each kind of"
        f" publish in turns (plain µs: {plain}).",
        rows,
        head=("", *BACKENDS.values()),
    )


def main() -> None:
    kind = sys.argv[1]
    args = [a for a in sys.argv[2:] if not a.startswith("--")]
    plain_only = "--plain-only" in sys.argv
    n, far, rounds = 2000, 100_000, 5
    if kind == "sqlite":
        sync = "NORMAL" if "--normal" in sys.argv else "FULL"
        where = Path(args[0]) if args else Path(tempfile.mkdtemp()) / "bench.db"
        driver = None if plain_only else (where, sync)
        got = measure(_sqlite(where, sync), n, far, rounds, plain_only, driver)
    else:
        got = measure(_postgres(args[0]), n, far, rounds, plain_only)
    print(json.dumps({kind: {k: round(statistics.median(v), 3) for k, v in got.items()}}))


if __name__ == "__main__":
    main()

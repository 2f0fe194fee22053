"""Flow control (issue 56): what pauses and backoffs cost the claims they do not hold back.

    .venv/bin/python bench/run.py --only flow --merge   # the workload, into RESULTS.md
    .venv/bin/python bench/flow.py sqlite|postgresql [URL]

Three queues of one database, each with a backlog of N free messages in GROUPS groups: ``plain``
(nothing held back), ``beside`` (HELD more groups of a routing key, published first, so they
are at the front of the rotation, and paused) and ``set`` (pauses and a backoff on other keys
and a group: set, not binding). Per round, in rotating order: µs per claim+ack of the backlog
on each, and the ratios to ``plain``. SQLite at synchronous FULL, PostgreSQL on a throw-away
cluster. Run alone it prints one JSON line of per-round medians.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import Config, Row, X, fmt_ratio, med, summary, verdict
from pg_server import Server
from scheduling import EVENT, GROUPS, claim_acks

from harel_sa import PostgresTransport, SqliteTransport

#: The issue's bars: a claim beside 10,000 paused groups, and limits set but not binding.
BESIDE_LIMIT, SET_LIMIT = 1.5, 1.1
QUEUES = ("plain", "beside", "set")


def _prepare(name: str, q: Any, held: int) -> None:
    if name == "beside":
        for i in range(0, held, 5_000):
            chunk = range(i, min(i + 5_000, held))
            q.publish_many([(f"held{j}", EVENT) for j in chunk], routing_key="slow")
        q.pause(routing_key="slow")
    elif name == "set":
        q.pause(routing_key="incident")
        q.pause(group_id="tenant-9")
        q.backoff("mail", 86_400)


def measure(opener: Callable[[], Any], n: int, held: int, rounds: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    opened = [opener() for _ in QUEUES]
    try:
        for name, q in zip(QUEUES, opened, strict=True):
            _prepare(name, q, held)
        for r in range(rounds):
            turn = list(zip(QUEUES, opened, strict=True))
            turn = turn[r % 3 :] + turn[: r % 3]
            for name, q in turn:
                out.setdefault(name, []).append(claim_acks(q, n))
    finally:
        for q in opened:
            q.close()
    for name in QUEUES[1:]:
        out[f"ratio_{name}"] = [a / b for a, b in zip(out[name], out["plain"], strict=True)]
    return out


def _opener(make: Callable[[str], Any]) -> Callable[[], Any]:
    made = iter(range(10**6))
    return lambda: make(f"f{next(made)}")


def run(cfg: Config) -> dict[str, Any]:
    n, held = cfg.size(300, 2_000), cfg.size(2_000, 10_000)
    out: dict[str, Any] = {"n": n, "held": held, "groups": GROUPS}
    path = str(cfg.fresh("flow"))
    out["sqlite"] = measure(_opener(lambda p: SqliteTransport(path, prefix=p)), n, held, cfg.reps)
    cfg.log("  flow sqlite done")
    server = Server(cfg.workdir)
    try:
        url = server.database()
        out["postgresql"] = measure(
            _opener(lambda p: PostgresTransport(url, prefix=p)), n, held, cfg.reps
        )
    finally:
        server.stop()
    cfg.log("  flow postgresql done")
    return out


BACKENDS = {"sqlite": "SQLite", "postgresql": "PG"}


def targets(w: dict[str, Any]) -> list[Row]:
    rows = []
    for backend, shown in BACKENDS.items():
        beside, set_ = w[backend]["ratio_beside"], w[backend]["ratio_set"]
        rows.append(
            (
                f"claim+ack beside {w['held']:,} paused groups ÷ none, {shown}, "
                f"≤ {BESIDE_LIMIT}{X}",
                fmt_ratio(beside),
                verdict(med(beside) <= BESIDE_LIMIT),
            )
        )
        rows.append(
            (
                f"claim+ack, pauses and a backoff set elsewhere ÷ none, {shown}, ≤ {SET_LIMIT}{X}",
                fmt_ratio(set_),
                verdict(med(set_) <= SET_LIMIT),
            )
        )
    return rows


def section(w: dict[str, Any]) -> list[str]:
    """A row per bar, a column per backend (:func:`targets` lists them one by one)."""
    rows = []
    for label, key, limit in (
        (
            f"beside {w['held']:,} paused groups ÷ none ≤ {BESIDE_LIMIT}{X}",
            "ratio_beside",
            BESIDE_LIMIT,
        ),
        (f"pauses and a backoff set elsewhere ÷ none ≤ {SET_LIMIT}{X}", "ratio_set", SET_LIMIT),
    ):
        rows.append(
            [label]
            + [f"{fmt_ratio(w[b][key])} {verdict(med(w[b][key]) <= limit)}" for b in BACKENDS]
        )
    plain = ", ".join(f"{v} {med(w[k]['plain']):.0f}" for k, v in BACKENDS.items())
    return summary(
        "Flow control (issue 56)",
        f"{w['n']:,} claim+acks of free messages, in turns (plain µs: {plain}).",
        rows,
        head=("claim+ack", *BACKENDS.values()),
    )


def main() -> None:
    kind = sys.argv[1]
    n, held, rounds = 2000, 10_000, 5
    if kind == "sqlite":
        where = sys.argv[2] if len(sys.argv) > 2 else str(Path(tempfile.mkdtemp()) / "b.db")
        got = measure(_opener(lambda p: SqliteTransport(where, prefix=p)), n, held, rounds)
    else:
        got = measure(_opener(lambda p: PostgresTransport(sys.argv[2], prefix=p)), n, held, rounds)
    print(json.dumps({kind: {k: round(statistics.median(v), 3) for k, v in got.items()}}))


if __name__ == "__main__":
    main()

"""Scheduled and keyed messages (issue 44): what they cost a claim and a publish.

``python bench/scheduling.py sqlite|postgresql [URL] [--plain-only]``: per-operation medians
(µs) of a claim+ack over a backlog with no scheduled message and with 100,000 far-future ones,
and of a plain, a scheduled and a keyed publish. ``--plain-only`` runs the plain claim+ack and
publish alone, with only the calls every release has (an A/B against an older checkout on
``PYTHONPATH``). Each figure is the median of ROUNDS rounds of N operations.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harel_sa import Event

N, ROUNDS, GROUPS, FAR = 2000, 5, 200, 100_000


def _open(kind: str, where: str) -> Any:
    if kind == "sqlite":
        from harel_sa import SqliteTransport

        # --normal: synchronous=NORMAL, no fsync per commit: the statements' own cost shows
        return SqliteTransport(where, synchronous="NORMAL" if "--normal" in sys.argv else "FULL")
    from harel_sa import PostgresTransport

    return PostgresTransport(where)


def _median(run: Any) -> float:
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) / N * 1e6)
    return statistics.median(times)


def claims(q: Any) -> float:
    """Median µs of a claim+ack over a backlog of N messages in GROUPS groups (published
    untimed before each round)."""
    times = []
    for _ in range(ROUNDS):
        q.publish_many([(f"g{i % GROUPS}", Event(kind="x")) for i in range(N)])
        start = time.perf_counter()
        for _ in range(N):
            q.ack(q.claim("w", 30.0))
        times.append((time.perf_counter() - start) / N * 1e6)
    return statistics.median(times)


def drain(q: Any) -> None:
    while (lease := q.claim("w", 30.0)) is not None:
        q.ack(lease)


def publishes(q: Any, **options: Any) -> float:
    counter = iter(range(10**9))

    def run() -> None:
        for i in range(N):
            n = next(counter)
            extra = {"key": f"k{n}"} if options.get("key") else {}
            q.publish(f"g{i % GROUPS}", Event(kind="x"), **{**options, **extra})

    return _median(run)


def main() -> None:
    kind = sys.argv[1]
    plain_only = "--plain-only" in sys.argv
    args = [a for a in sys.argv[2:] if not a.startswith("--")]
    where = args[0] if args else str(Path(tempfile.mkdtemp()) / "bench.db")
    out: dict[str, float] = {}
    with _open(kind, where) as q:
        out["claim_ack_us"] = claims(q)
        out["publish_us"] = publishes(q)
        if not plain_only:
            for i in range(0, FAR, 10_000):  # 100,000 messages due in a year
                q.publish_many(
                    [(f"f{j % GROUPS}", Event(kind="far")) for j in range(i, i + 10_000)],
                    delay=365 * 86400.0,
                )
            out["claim_ack_us_with_100k_far_future"] = claims(q)
            out["publish_delay_us"] = publishes(q, delay=3600.0)
            out["publish_key_us"] = publishes(q, key=True)
            out["ratio_claim"] = out["claim_ack_us_with_100k_far_future"] / out["claim_ack_us"]
            out["ratio_scheduled_publish"] = out["publish_delay_us"] / out["publish_us"]
            out["ratio_keyed_publish"] = out["publish_key_us"] / out["publish_us"]
    print(json.dumps({kind: {k: round(v, 3) for k, v in out.items()}}))


if __name__ == "__main__":
    main()

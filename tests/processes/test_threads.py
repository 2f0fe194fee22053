"""One sync transport shared by eight threads: publish, claim and ack all at once.

Every statement the connection runs is recorded with the thread that ran it (the sqlite3
trace callback runs in the calling thread): each transaction, ``BEGIN IMMEDIATE`` to
``COMMIT``, must come whole from one thread. No call may fail, and every message is handled
exactly once, in order within its group.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from harel_sa import Event, SqliteTransport

THREADS = 8
PER_THREAD = 150
SHARED_GROUPS = 4


def transactions(trace: list[tuple[int, str]]) -> tuple[list[list[tuple[int, str]]], list[str]]:
    """Split the statement trace into transactions; report statements that break the shape."""
    done: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str]] | None = None
    problems = []
    for thread, sql in trace:
        if sql.startswith("BEGIN"):
            if current is not None:
                problems.append(f"BEGIN inside an open transaction: {current[0]} then {thread}")
            current = [(thread, sql)]
        elif current is None:
            problems.append(f"statement outside a transaction from {thread}: {sql[:60]}")
        else:
            current.append((thread, sql))
            if sql in ("COMMIT", "ROLLBACK"):
                done.append(current)
                current = None
    if current is not None:
        problems.append("a transaction never ended")
    for tx in done:
        threads = {t for t, _ in tx}
        if len(threads) != 1:
            problems.append(f"statements of threads {threads} in one transaction")
    return done, problems


def test_eight_threads_share_one_sync_transport(tmp_path: Path) -> None:
    t: SqliteTransport[Any] = SqliteTransport(str(tmp_path / "queue.db"))
    trace: list[tuple[int, str]] = []
    # The transport's own connection (private): the trace callback sees every statement.
    t._db.raw.set_trace_callback(  # type: ignore[union-attr]
        lambda sql: trace.append((threading.get_ident(), sql))
    )
    published: dict[str, list[str]] = {}  # "group/thread" -> ids in that thread's order
    handled: list[tuple[str, int, str]] = []  # (group, seq, id), in claim order
    failures: list[BaseException] = []
    acks: Counter[bool] = Counter()
    start = threading.Barrier(THREADS)
    publishing = [THREADS]
    lock = threading.Lock()

    def run(n: int) -> None:
        rng = random.Random(n)
        try:
            start.wait()
            own = f"t{n}"
            for i in range(PER_THREAD):
                # Its own group keeps its order; shared groups interleave the threads.
                group = own if i % 2 else f"shared{rng.randrange(SHARED_GROUPS)}"
                event = Event(kind="job", id=f"{n}.{i}")
                t.publish(group, event)
                published.setdefault(f"{group}/{n}", []).append(event.id)
                if rng.random() < 0.6:
                    work(f"t{n}")
            with lock:
                publishing[0] -= 1
            while not failures:  # once one thread failed, the others stop too
                if work(f"t{n}"):
                    continue
                with lock:
                    if publishing[0] == 0 and t.stats().messages == 0:
                        return
        except BaseException as exc:
            failures.append(exc)

    def work(worker: str) -> bool:
        lease = t.claim(worker, 60.0)
        if lease is None:
            return False
        handled.append((lease.group_id, lease.seq, lease.event.id))
        acks[t.ack(lease)] += 1
        return True

    threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in range(THREADS)]
    for th in threads:
        th.start()
    deadline = time.monotonic() + 60
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))
    assert not any(th.is_alive() for th in threads)
    t.close()

    assert failures == []
    txs, problems = transactions(trace)
    assert problems == []
    assert len({thread for tx in txs for thread, _ in tx}) == THREADS
    counts = Counter(i for _, _, i in handled)
    assert set(counts) == {i for ids in published.values() for i in ids}
    assert [i for i, c in counts.items() if c != 1] == []
    assert acks == Counter({True: THREADS * PER_THREAD})
    # Within a group, claims follow seq order, and each thread's publishes keep their order.
    by_group: dict[str, list[tuple[int, str]]] = {}
    for group, seq, i in handled:
        by_group.setdefault(group, []).append((seq, i))
    for group, got in by_group.items():
        assert [s for s, _ in got] == sorted(s for s, _ in got), group
        for n in range(THREADS):
            mine = [i for _, i in got if i.split(".")[0] == str(n)]
            assert mine == published.get(f"{group}/{n}", []), (group, n)

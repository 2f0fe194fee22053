"""Group queues drained in turns by the same worker processes, so their ratios hold on a
machine whose commits slow down and speed up over seconds.

A PostgreSQL commit waits for a WAL flush whose time drifts within a minute on a shared disk
(the run's own spread, in results.json, shows by how much). Two drains run one after the other
take that drift as a difference between the queues. So :func:`drain_in_turns` fills each queue
into a database of its own, starts the worker processes once, and has them drain the queues in
turns of :data:`TURN` seconds: every process works on the same queue at the same time (released
together by a barrier), the queues follow each other in an order that rotates every round, and a
queue's rate is its messages over the sum of its turns. A turn lasts from the barrier to the
last ack of any process in it. Every queue is still drained to empty and checked as a drain is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pg_peers
from procs import gather, reaped

#: Seconds each process works on one queue in a turn (then finishes the call it is in).
TURN = 0.1
#: A worker's view of one turn: (process, queue, start, last ack or None, messages, empty).
TurnRow = tuple[int, str, float, float | None, int, bool]


def _turn(q: Any, worker_id: str, handled: list[Any], deadline: float) -> tuple[Any, ...]:
    """Claim + ack until ``deadline``: (empty, stale acks, when the last ack returned)."""
    stale, last = 0, None
    while time.monotonic() < deadline:
        lease = q.claim(worker_id)
        if lease is None:
            if q.empty():
                return True, stale, last
            time.sleep(0.0005)  # every group with messages is in flight elsewhere
            continue
        claimed_at = time.monotonic()
        if q.ack(lease) is False:
            stale += 1
        handled.append((lease.event.data["i"], claimed_at))
        last = time.monotonic()
    return False, stale, last


def _batched_turn(
    q: Any, worker_id: str, batch: int, leases: list[Any], handled: list[Any], deadline: float
) -> tuple[Any, ...]:
    """``claim_many`` / ``ack_many_and_claim_many`` until ``deadline``: (the leases held into
    the queue's next turn, empty, stale acks, when the last ack returned)."""
    stale, last = 0, None
    while time.monotonic() < deadline:
        if not leases:
            leases = q.claim_many(worker_id, batch)
            if not leases:
                if q.empty():
                    return [], True, stale, last
                time.sleep(0.0005)
                continue
        claimed_at = time.monotonic()
        acked, following = q.ack_many_and_claim_many(leases, worker_id, batch)
        stale += sum(1 for a in acked if a is False)
        handled.extend((lease.event.data["i"], claimed_at) for lease in leases)
        last = time.monotonic()
        leases = following
    return leases, False, stale, last


def worker(
    names: list[str], urls: list[str], index: int, barrier: Any, inbox: Any, out: Any
) -> None:
    """Open every queue; for each queue named in ``inbox``, wait at ``barrier``, work a
    turn on it and report a :data:`TurnRow`; on ``None``, report (process, handled per queue
    as ``[(i, claimed_at)]``, stale acks per queue) and end."""
    kinds = {name: pg_peers.group_queue(name) for name in names}
    queues = {name: kinds[name].open(url, index) for name, url in zip(names, urls, strict=True)}
    handled: dict[str, list[Any]] = {name: [] for name in names}
    stale = dict.fromkeys(names, 0)
    held: dict[str, list[Any]] = {name: [] for name in names}
    worker_id = f"p{index}"
    try:
        while (name := inbox.get()) is not None:
            q, batch, before = queues[name], kinds[name].batch, len(handled[name])
            barrier.wait()
            start = time.monotonic()
            if batch > 1:
                held[name], empty, s, last = _batched_turn(
                    q, worker_id, batch, held[name], handled[name], start + TURN
                )
            else:
                empty, s, last = _turn(q, worker_id, handled[name], start + TURN)
            stale[name] += s
            out.put((index, name, start, last, len(handled[name]) - before, empty))
        out.put((index, handled, stale))
    finally:
        for q in queues.values():
            q.close()


def drain_in_turns(
    ctx: Any, urls: dict[str, str], procs: int, rotation: int, log: Callable[[str], None]
) -> dict[str, dict[str, Any]]:
    """Drain the filled queues ``urls`` (name: database) in turns with ``procs`` processes,
    the first round's order rotated by ``rotation``. Per queue: ``seconds`` (its turns'),
    ``turns``, and ``rows`` as a drain's: (process, 0, 0, [(i, claimed_at)], stale acks)."""
    names = list(urls)
    barrier, out = ctx.Barrier(procs), ctx.Queue()
    inboxes = [ctx.Queue() for _ in range(procs)]
    ps = [
        ctx.Process(
            target=worker, args=(names, [urls[n] for n in names], k, barrier, inboxes[k], out)
        )
        for k in range(procs)
    ]
    for p in ps:
        p.start()
    seconds, turns = dict.fromkeys(names, 0.0), dict.fromkeys(names, 0)
    left, round_ = list(names), rotation
    with reaped(ps):
        while left:
            k = round_ % len(left)
            for name in left[k:] + left[:k]:
                for box in inboxes:
                    box.put(name)
                rows: list[TurnRow] = gather(out, procs, ps)
                lasts = [r[3] for r in rows if r[3] is not None]
                if lasts:
                    seconds[name] += max(lasts) - min(r[2] for r in rows)
                    turns[name] += 1
                if any(r[5] for r in rows):
                    left.remove(name)
            round_ += 1
        for box in inboxes:
            box.put(None)
        finals = gather(out, procs, ps)
    log(f"  pg turns x{procs}: {turns}")
    return {
        name: {
            "seconds": seconds[name],
            "turns": turns[name],
            "rows": [
                (index, 0.0, 0.0, handled[name], stale[name]) for index, handled, stale in finals
            ],
        }
        for name in names
    }


def publish_in_turns(
    kinds: dict[str, pg_peers.GroupQueueKind],
    urls: dict[str, str],
    n: int,
    groups: int,
    batch: int,
    rotation: int,
) -> dict[str, float]:
    """msgs/s of each queue of ``urls`` (name: an empty database with the schema of the
    queue ``kinds`` names) publishing ``n`` messages over ``groups`` groups, one call per
    message (``batch`` 1) or ``publish_many`` of ``batch``, in turns of :data:`TURN` seconds,
    the first round's order rotated by ``rotation``; each queue's rate is over its turns."""
    calls: dict[str, list[Any]] = {}
    for name in urls:
        items = [(f"g{i % groups}", kinds[name].event(i)) for i in range(n)]
        calls[name] = items if batch == 1 else [items[i : i + batch] for i in range(0, n, batch)]
    queues = {name: kinds[name].open(url, 0) for name, url in urls.items()}
    try:
        done, seconds = dict.fromkeys(urls, 0), dict.fromkeys(urls, 0.0)
        left, round_ = list(urls), rotation
        while left:
            k = round_ % len(left)
            for name in left[k:] + left[:k]:
                q, todo = queues[name], calls[name]
                start = time.perf_counter()
                deadline, i = start + TURN, done[name]
                while i < len(todo) and time.perf_counter() < deadline:
                    if batch == 1:
                        q.publish(*todo[i])
                    else:
                        q.publish_many(todo[i])
                    i += 1
                seconds[name] += time.perf_counter() - start
                done[name] = i
                if i == len(todo):
                    left.remove(name)
            round_ += 1
    finally:
        for q in queues.values():
            q.close()
    return {name: n / seconds[name] for name in urls}

"""Claims in parallel: worker processes on one PostgreSQL database, each on its own connection.

Every message is delivered exactly once, FIFO per group, never two live leases in one group
(checked in SQL after every claim), and claims from different processes overlap in time (no
global lock); a claim in progress on one group does not hold up a claim of another. The same
holds for processes draining in batches (``claim_many``, ``ack_many``,
``ack_many_and_claim_many``), whose statements lease and ack many groups at once.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from harel_sa import Event, PostgresTransport
from harel_sa.schema import Names
from tests import forkserver

NAMES = Names()
PROCESSES = 8
GROUPS = 40
PER_GROUP = 25
VIS = 60.0

LIVE = "locked_by IS NOT NULL AND lock_expiry >= extract(epoch from statement_timestamp())"
#: Every live lease of the groups named, by group: a batch's own, and no other.
LIVE_IN_GROUPS = (
    f"SELECT group_id, array_agg(locked_by) FROM {NAMES.messages} "
    f"WHERE group_id = ANY(%s) AND {LIVE} GROUP BY group_id"
)
#: Groups with two live leases, anywhere in the queue.
DOUBLED = f"SELECT group_id FROM {NAMES.messages} WHERE {LIVE} GROUP BY 1 HAVING count(*) > 1"
BATCH = 8
BATCH_PROCESSES = 6

LIVE_IN_GROUP = (
    f"SELECT count(*) FROM {NAMES.messages} WHERE group_id = %s AND locked_by IS NOT NULL "
    "AND lock_expiry >= extract(epoch from statement_timestamp())"
)


def work(url: str, index: int, start: Any, results: Any) -> None:
    q = PostgresTransport(url, create_schema=False, pool_size=1)
    check = psycopg.connect(url, autocommit=True)
    got = []
    start.wait()
    try:
        while True:
            began = time.time()
            lease = q.claim(f"w{index}", VIS)
            claimed = time.time()
            if lease is None:
                break
            (live,) = check.execute(LIVE_IN_GROUP, (lease.group_id,)).fetchone() or (0,)
            assert q.ack(lease)
            got.append((lease.group_id, lease.event.data["n"], began, claimed, time.time(), live))
    finally:
        results.put((index, got))
        check.close()
        q.close()


def fill(url: str) -> None:
    """PER_GROUP messages in each of GROUPS groups, numbered in each group (``data["n"]``)."""
    with PostgresTransport(url) as q:
        q.publish_many(
            [
                (f"g{g}", Event(kind="job", data={"n": n}))
                for n in range(PER_GROUP)
                for g in range(GROUPS)
            ]
        )


def test_eight_processes_deliver_every_message_once_in_order_in_parallel(pg_url: str) -> None:
    fill(pg_url)
    ctx = forkserver.context()
    start, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=work, args=(pg_url, i, start, results)) for i in range(PROCESSES)]
    for p in procs:
        p.start()
    start.set()
    by_process = dict(results.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * PROCESSES

    deliveries = [(i, *d) for i, got in by_process.items() for d in got]
    delivered = sorted((group, n) for _, group, n, *_ in deliveries)
    assert delivered == sorted((f"g{g}", n) for g in range(GROUPS) for n in range(PER_GROUP))
    assert all(live == 1 for *_, live in deliveries)  # the claimer's lease, and no other

    for g in range(GROUPS):
        mine = sorted((d for d in deliveries if d[1] == f"g{g}"), key=lambda d: d[4])
        assert [d[2] for d in mine] == list(range(PER_GROUP))  # FIFO, across processes

    busy = [i for i, got in by_process.items() if got]
    assert len(busy) >= PROCESSES // 2  # the work spread over the processes
    overlapping = sum(
        1
        for a in deliveries
        for b in deliveries
        if a[0] < b[0] and a[3] < b[4] and b[3] < a[4]  # two processes' claims at once
    )
    assert overlapping > 0


def test_a_claim_in_progress_does_not_hold_up_a_claim_of_another_group(pg_url: str) -> None:
    """No global lock: a transaction holding group a's row and head (as a claim does while it
    runs) leaves group b claimable at once, and a itself is passed over, not waited for."""
    with PostgresTransport(pg_url, busy_timeout=30) as q:
        q.publish("a", Event(kind="a1"))
        q.publish("b", Event(kind="b1"))
        holder = psycopg.connect(pg_url)
        try:
            holder.execute(
                f"SELECT 1 FROM {NAMES.groups} g JOIN {NAMES.messages} m USING (group_id) "
                "WHERE g.group_id = 'a' FOR UPDATE OF g, m"
            )
            lease = q.claim("w", VIS)  # would wait up to busy_timeout behind a global lock
            assert lease is not None and lease.group_id == "b"
            assert q.claim("w", VIS) is None  # a is locked: skipped, not waited on
        finally:
            holder.rollback()  # at once: a closed socket frees the locks only later
            holder.close()
        following = q.claim("w", VIS)
        assert following is not None and following.group_id == "a"


def drain_in_batches(url: str, index: int, ready: Any, start: Any, results: Any) -> None:
    """Claim and ack batches of BATCH until the queue is empty: fused
    (``ack_many_and_claim_many``) in even processes, ``ack_many`` then ``claim_many`` in odd
    ones. After every claim, the live leases of the batch's groups are read in SQL: each
    group's is the batch's lease, and no group anywhere has two."""
    q = PostgresTransport(url, create_schema=False, pool_size=1)
    check = psycopg.connect(url, autocommit=True)
    got: list[tuple[str, int, float]] = []
    bad: list[Any] = []
    q.stats()  # connected
    ready.put(index)
    start.wait()
    try:
        worker = f"w{index}"
        leases = q.claim_many(worker, VIS, BATCH)
        while True:
            claimed = time.time()
            if not leases:
                if q.stats().messages == 0:
                    break
                time.sleep(0.002)  # the groups left are leased by others
                leases = q.claim_many(worker, VIS, BATCH)
                continue
            groups = [lease.group_id for lease in leases]
            live = dict(check.execute(LIVE_IN_GROUPS, (groups,)).fetchall())
            if live != {lease.group_id: [lease.locked_by] for lease in leases}:
                bad.append(("live", live, [(x.group_id, x.locked_by) for x in leases]))
            doubled = check.execute(DOUBLED).fetchall()
            if doubled:
                bad.append(("doubled", doubled))
            got += [(x.group_id, x.event.data["n"], claimed) for x in leases]
            if index % 2 == 0:
                acked, leases = q.ack_many_and_claim_many(leases, worker, VIS, BATCH)
            else:
                acked = q.ack_many(leases)
                leases = q.claim_many(worker, VIS, BATCH)
            if not all(acked):
                bad.append(("ack", acked))
    finally:
        results.put((index, got, bad))
        check.close()
        q.close()


def test_processes_draining_in_batches_deliver_every_message_once_in_order(pg_url: str) -> None:
    fill(pg_url)
    ctx = forkserver.context()
    ready, start, results = ctx.Queue(), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=drain_in_batches, args=(pg_url, i, ready, start, results))
        for i in range(BATCH_PROCESSES)
    ]
    for p in procs:
        p.start()
    for _ in procs:  # every process connected: they start together
        ready.get(timeout=120)
    start.set()
    by_process = {i: (got, bad) for i, got, bad in (results.get(timeout=300) for _ in procs)}
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * BATCH_PROCESSES
    assert [bad for _, bad in by_process.values() if bad] == []

    deliveries = [d for got, _ in by_process.values() for d in got]
    delivered = sorted((group, n) for group, n, _ in deliveries)
    assert delivered == sorted((f"g{g}", n) for g in range(GROUPS) for n in range(PER_GROUP))
    for g in range(GROUPS):
        mine = sorted((d for d in deliveries if d[0] == f"g{g}"), key=lambda d: d[2])
        assert [d[1] for d in mine] == list(range(PER_GROUP))  # FIFO, across processes
    busy = [i for i, (got, _) in by_process.items() if got]
    assert len(busy) >= BATCH_PROCESSES // 2  # the work spread over the processes


def test_a_batch_of_acks_locks_the_groups_it_empties_in_group_id_order(pg_url: str) -> None:
    """Two batches of acks never wait on each other's group rows in a cycle: each locks the
    groups it drops in group_id order, whatever the order of its leases. With g4's row held by
    another transaction, the batch holds g1 to g3, waits for g4, and has not reached g5 to g8."""
    groups = [f"g{i}" for i in range(8, 0, -1)]  # claimed g8 first: the leases out of order
    with PostgresTransport(pg_url, busy_timeout=30) as q:
        for group in groups:
            q.publish(group, Event(kind=group))
        leases = q.claim_many("w", VIS, len(groups))
        assert [x.group_id for x in leases] == groups
        holder = psycopg.connect(pg_url)
        done: list[list[bool]] = []
        acker = threading.Thread(target=lambda: done.append(q.ack_many(leases)))
        try:
            holder.execute(f"SELECT 1 FROM {NAMES.groups} WHERE group_id = 'g4' FOR UPDATE")
            acker.start()
            with psycopg.connect(pg_url, autocommit=True) as probe:
                waiting = (
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()"
                )
                deadline = time.monotonic() + 20
                while probe.execute(waiting).fetchone() != (1,):
                    assert time.monotonic() < deadline, "the batch never waited for g4"
                    time.sleep(0.01)
                free = probe.execute(
                    f"SELECT group_id FROM {NAMES.groups} ORDER BY group_id FOR UPDATE SKIP LOCKED"
                ).fetchall()
            assert free == [("g5",), ("g6",), ("g7",), ("g8",)]
        finally:
            holder.rollback()
            holder.close()
            acker.join(30)
        assert done == [[True] * len(groups)]
        assert q.stats().groups == 0

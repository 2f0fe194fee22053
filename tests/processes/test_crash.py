"""Crash test: producers and workers on one file, SIGKILLed over many rounds, then drained.

Each round starts every process (a new incarnation each time), kills one at a random moment
every few hundred milliseconds and restarts whatever died, gives the incarnations with a plan
a little longer to reach it, then kills them all at once and checks the file. Besides the
random kills (of incarnations without a plan), most incarnations are told to kill themselves
at a chosen point (``bodies.PRODUCER_POINTS``/``WORKER_POINTS``): between the statements of a
publish, a claim or an ack, just before their COMMIT, right after they returned, in the middle
of handling, in a heartbeat. Incarnations alternate ``synchronous`` FULL and NORMAL: a process
crash loses nothing with either. Leases last ``VIS`` seconds of real time (the one place real
time is needed: a killed worker's lease must lapse); the final drain runs on a clock ``2 * VIS``
ahead, so it needs no sleep to see every old lease lapsed.

Afterwards: every publish a producer logged (only after ``publish()`` returned) was handled
at least once and the queue is empty; no row was ever stranded; no group ever had two live
leases (checked inside each worker after each claim, and as non-overlapping handling
intervals); per-group order held for every first handling; no message was acked twice.

Default: a few rounds (well under two minutes). ``--long``: many more.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests import forkserver
from tests.flag import Flag
from tests.processes import bodies
from tests.processes.bodies import PHASES, Plan, ProducerConfig, WorkerConfig

VIS = 1.0
PRODUCERS = 2
WORKERS = 3
GROUPS_PER_PRODUCER = 6
ROUND_SECONDS = 2.5
ROUNDS = 8
LONG_ROUNDS = 120
MAX_ROUNDS_FACTOR = 3  # extra rounds, up to this many times the rounds, until every point landed
PLAN_SHARE = 0.6  # share of incarnations told to kill themselves at a point
DRAIN_RATE = 100  # messages a second the drainers manage at the least (a loaded machine)


class Fleet:
    """The producer and worker processes, restarted as they die."""

    def __init__(self, path: str, logs: Path, seed: int, batch: int = 1) -> None:
        self.batch = batch  # above 1: the workers are batching harel_sa Workers
        self.ctx = forkserver.context()
        self.path = path
        self.logs = logs
        self.rng = random.Random(seed)
        self.slots = PRODUCERS + WORKERS
        self.phases = self.ctx.Array("b", self.slots, lock=False)
        self.never = Flag(self.ctx)  # workers in the chaos never stop on an empty queue
        self.procs: dict[int, Any] = {}
        self.incarnations = Counter[int]()
        self.points = {
            "producer": list(bodies.PRODUCER_POINTS),
            "worker": list(bodies.WORKER_POINTS),
        }
        self.next_point = Counter[str]()
        self.planned: set[int] = set()  # slots whose incarnation is to kill itself at a point
        self.landed: set[tuple[str, str]] = set()  # the planned kills seen in the logs so far
        self.external_kills: Counter[str] = Counter()
        self.bad_exits: list[str] = []

    def _plan(self, role: str) -> Plan | None:
        if self.rng.random() >= PLAN_SHARE:
            return None
        # A planned kill may never land (the process is killed from outside first, or a loaded
        # machine runs fewer operations in a round): points not seen yet go first.
        points = [p for p in self.points[role] if p not in self.landed] or self.points[role]
        op, where = points[self.next_point[role] % len(points)]
        self.next_point[role] += 1
        return Plan(op, where, self.rng.randint(1, 3))

    def start(self, slot: int) -> None:
        inc = self.incarnations[slot]
        self.incarnations[slot] += 1
        sync = "NORMAL" if inc % 2 else "FULL"
        seed = self.rng.randrange(1 << 30)
        if slot < PRODUCERS:
            groups = tuple(f"p{slot}-g{k}" for k in range(GROUPS_PER_PRODUCER))
            target: Any = bodies.producer_main
            cfg: Any = ProducerConfig(
                self.path,
                str(self.logs),
                slot,
                inc,
                groups,
                plan=self._plan("producer"),
                phases=self.phases,
                synchronous=sync,
                pause=0.01,
                seed=seed,
            )
        else:
            target = bodies.worker_main
            cfg = WorkerConfig(
                self.path,
                str(self.logs),
                slot,
                inc,
                VIS,
                plan=self._plan("worker"),
                phases=self.phases,
                producers_done=self.never,
                synchronous=sync,
                # A batching worker with a plan dies at its first batches (a claim_many, an ack
                # batch), so it handles fewer messages a round: more of them are slow, so that
                # one is still seen to outlive VIS by the heartbeat's extends.
                slow_share=0.05 if self.batch == 1 else 0.25,
                batch=self.batch,
                seed=seed,
            )
        self.phases[slot] = 0
        if cfg.plan is None:
            self.planned.discard(slot)
        else:
            self.planned.add(slot)
        proc = self.ctx.Process(target=target, args=(cfg,), name=f"slot{slot}.{inc}")  # type: ignore[attr-defined]
        proc.start()
        self.procs[slot] = proc

    def start_all(self) -> None:
        for slot in range(self.slots):
            self.start(slot)

    def _reaped(self, slot: int) -> None:
        proc = self.procs.pop(slot)
        proc.join()
        if proc.exitcode != -signal.SIGKILL:  # only SIGKILL ends a process here
            self.bad_exits.append(f"{proc.name} exited with {proc.exitcode}")

    def restart_dead(self) -> None:
        for slot, proc in list(self.procs.items()):
            if not proc.is_alive():
                self._reaped(slot)
                self.start(slot)

    def kill_one(self) -> None:
        # Incarnations with a plan are left to reach their point: on a loaded machine random
        # kills would otherwise end most of them before they get there.
        unplanned = sorted(set(self.procs) - self.planned)
        if not unplanned:
            return
        slot = self.rng.choice(unplanned)
        role = "producer" if slot < PRODUCERS else "worker"
        phase = PHASES[self.phases[slot]]
        if self.procs[slot].is_alive() and sigkill(self.procs[slot].pid):
            self.external_kills[f"{role} {phase}"] += 1

    def wait_for_planned(self, timeout: float) -> None:
        """Give the planned incarnations still alive up to ``timeout`` to kill themselves."""
        end = time.monotonic() + timeout
        while time.monotonic() < end and any(
            self.procs[slot].is_alive() for slot in self.planned if slot in self.procs
        ):
            time.sleep(0.05)

    def kill_all(self) -> None:
        for slot, proc in list(self.procs.items()):
            if proc.is_alive():
                sigkill(proc.pid)
            self._reaped(slot)


def sigkill(pid: int) -> bool:
    """SIGKILL ``pid``; ``False`` if it was gone already (it may end itself at a planned point
    between a look at it and the kill)."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def kept_a_slow_lease(logs: Path) -> bool:
    """Some handler outlived its visibility and still held its lease at the end (it extended
    it). Only a few handlers are slow, and random kills end many of them, so the rounds go on
    until one is seen."""
    return any(h.live and h.t2 - h.t1 > VIS for h in bodies.handlings(logs))


def live_leases_after(path: str, now: float) -> int:
    with sqlite3.connect(path) as raw:
        found: int = raw.execute(
            f"SELECT count(*) FROM {bodies.M} WHERE locked_by IS NOT NULL AND lock_expiry >= ?",
            (now,),
        ).fetchone()[0]
        return found


@pytest.mark.parametrize("batch", [1, 4], ids=["one-at-a-time", "batching-worker"])
def test_producers_and_workers_killed_at_random_moments_lose_nothing(
    tmp_path: Path, request: pytest.FixtureRequest, batch: int
) -> None:
    """``batch`` 4: the workers are harel_sa Workers batching 4 leases (4 slots), whose
    batcher's claims and acks are killed at the same points."""
    rounds = LONG_ROUNDS if request.config.getoption("--long") else ROUNDS
    path = str(tmp_path / "queue.db")
    logs = tmp_path / "logs"
    logs.mkdir()
    seed = int(os.environ.get("HAREL_CRASH_SEED", "20240611"))
    fleet = Fleet(path, logs, seed=seed, batch=batch)
    rng = random.Random(fleet.rng.random())
    planned = set(bodies.PRODUCER_POINTS + bodies.WORKER_POINTS)
    try:
        for played in range(1, MAX_ROUNDS_FACTOR * rounds + 1):
            fleet.start_all()
            end = time.monotonic() + ROUND_SECONDS
            while time.monotonic() < end:
                time.sleep(rng.uniform(0.1, 0.5))
                fleet.restart_dead()
                fleet.kill_one()
            fleet.wait_for_planned(ROUND_SECONDS)
            fleet.kill_all()  # everyone dies at once: the file is as crashes leave it
            fleet.landed = set(bodies.kills(logs))
            assert bodies.stranded(path) == {
                "message without group": 0,
                "group without message": 0,
                "locked without expiry": 0,
            }
            if played >= rounds and planned <= fleet.landed and kept_a_slow_lease(logs):
                break  # every planned point has landed, and an extend was seen to matter
    finally:
        fleet.kill_all()
    assert bodies.errors(logs) == []
    assert fleet.bad_exits == []
    # Every lease was taken by a process now dead: none outlives VIS.
    assert live_leases_after(path, time.time() + VIS) == 0

    # Drain: fresh workers whose clock is 2 * VIS ahead, so every old lease has lapsed.
    ctx = fleet.ctx
    done = Flag(ctx)
    done.set()
    drainers = [
        ctx.Process(  # type: ignore[attr-defined]
            target=bodies.worker_main,
            args=(
                WorkerConfig(
                    path,
                    str(logs),
                    slot=90 + i,
                    incarnation=0,
                    visibility=30.0,
                    producers_done=done,
                    clock_offset=2 * VIS,
                    handle_max=0.0,
                    seed=i,
                ),
            ),
            name=f"drainer-{i}",
        )
        for i in range(3)
    ]
    with sqlite3.connect(path) as raw:  # the long rounds leave a backlog: time to drain it
        backlog = raw.execute(f"SELECT count(*) FROM {bodies.M}").fetchone()[0]
    for p in drainers:
        p.start()
    bodies.join_all(drainers, timeout=90 + backlog / DRAIN_RATE)
    assert bodies.errors(logs) == []
    assert [p.exitcode for p in drainers] == [0, 0, 0]

    with sqlite3.connect(path) as raw:
        left = {
            t: raw.execute(f"SELECT count(*) FROM harel_transport_{t}").fetchone()[0]
            for t in ("messages", "groups", "dead")
        }
    assert left == {"messages": 0, "groups": 0, "dead": 0}

    logged = bodies.published(logs)
    handled = bodies.handlings(logs)
    handled_ids = {h.id for h in handled}
    all_logged = [i for ids in logged.values() for i in ids]
    assert len(all_logged) == len(set(all_logged))

    # Every committed publish (as its producer logged it) was handled at least once.
    assert [i for i in all_logged if i not in handled_ids] == []

    # A message handled but never logged can only be of the publish its producer was killed
    # in: the call after the last one it logged, or that call itself when the kill came while
    # it logged a publish_many's items. Anything else would be a phantom.
    last_logged: dict[tuple[str, str], int] = {}
    for i in all_logged:
        slot, inc, n, _ = i.split(".")
        last_logged[slot, inc] = max(last_logged.get((slot, inc), -1), int(n))
    unlogged = handled_ids - set(all_logged)
    phantoms = []
    for i in unlogged:
        slot, inc, n, _ = i.split(".")
        if int(n) - last_logged.get((slot, inc), -1) not in (0, 1):
            phantoms.append(i)
    assert phantoms == []

    # No group ever had two live leases at once.
    assert [h for h in handled if h.check.startswith("VIOLATION")] == []
    assert bodies.overlaps(handled) == []
    # A redelivered message is done again before its successor in the group begins.
    assert bodies.successors_too_early(handled) == []

    # Per-group order: first handlings follow publish order (and seq order).
    order = bodies.first_handlings(handled)
    for group, ids in logged.items():
        wanted = set(ids)
        assert [h.id for h in order[group] if h.id in wanted] == ids, group
    for hs in order.values():
        assert [h.seq for h in hs] == sorted(h.seq for h in hs)

    # No message was acked twice (a stale lease's ack must change nothing).
    acked = Counter(a["acked"] for a in bodies.acks(logs) if a["ok"])
    assert [i for i, n in acked.items() if n > 1] == []

    # The self-kills landed at every point they were meant to.
    points = set(bodies.kills(logs))
    missing = set(bodies.PRODUCER_POINTS + bodies.WORKER_POINTS) - points
    assert missing == set()

    # Slow handlers outlived their visibility and kept their message by extending it.
    kept = [h for h in handled if h.live and h.t2 - h.t1 > VIS]
    assert kept != []

    redelivered = sum(n - 1 for n in Counter(h.id for h in handled).values())
    print(
        f"\n{played} rounds: {sum(fleet.incarnations.values())} incarnations, "
        f"{len(bodies.kills(logs))} self-kills, {sum(fleet.external_kills.values())} random "
        f"kills {dict(fleet.external_kills)}; {len(all_logged)} logged publishes, "
        f"{len(unlogged)} committed but unlogged, {len(handled)} handlings, "
        f"{redelivered} repeat handlings, {sum(not h.live for h in handled)} past their lease, "
        f"{len(kept)} kept past VIS by extend"
    )

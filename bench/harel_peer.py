"""Workload "harel": harel_sa against the harel engine's own SQLite transports, in one run.

- **drain**: N messages (the engine's own ``Event``) over G groups, published through each
  transport, then drained by one worker with ``claim`` + ``ack`` (separate calls, as the engine
  makes them), for the sync transports and for the async twins awaited in turn. Both run at the
  engine's durability: WAL, ``synchronous`` FULL (SQLite's default, which harel keeps).
- **engine**: E executions of a small machine (three events, an action on one state) created
  and sent through harel's ``DistributedRunner`` and processed by harel's ``Worker``
  (``execution="inline"``), on harel's ``SqliteStore`` in a file of its own, with each transport.

Each repetition runs harel's transport and harel_sa's back to back, the order alternating.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from common import (
    VISIBILITY,
    Config,
    Row,
    X,
    claim_and_ack_all,
    fmt_ratio,
    med,
    ratios,
    summary,
    verdict,
)

THEIRS, OURS = "harel", "harel_sa"
PEERS = (THEIRS, OURS)

MACHINE = """
event Pick {}
event Pack {}
event Ship {}
machine order {
  initial Cart
  state Cart {}
  state Picked { on enter harel_peer.mark }
  state Packed {}
  final Shipped success
  from Cart to Picked on Pick
  from Picked to Packed on Pack
  from Packed to Shipped on Ship
}
"""


def mark(stm: Any, event: Any, **_: Any) -> None:
    """The machine's action: one write into the execution's context."""
    stm.execution_ctx["picked"] = True


def _order(rep: int) -> tuple[str, str]:
    return PEERS if rep % 2 == 0 else (OURS, THEIRS)


def _sync_transport(peer: str, path: Path) -> Any:
    if peer == THEIRS:
        from harel.engine.transport import SqliteTransport

        return SqliteTransport(path)
    from harel_sa import SqliteTransport as Ours

    return Ours(path)


async def _async_transport(peer: str, path: Path) -> Any:
    if peer == THEIRS:
        from harel.engine.aio_transport import AsyncSqliteTransport

        return await AsyncSqliteTransport.create(str(path))
    from harel_sa import AsyncSqliteTransport as Ours

    return await Ours.create(path)


def _events(n: int) -> list[Any]:
    from harel.spec.states import Event

    return [Event(kind="bench.tick", data={"i": i, "note": "benchmark payload"}) for i in range(n)]


def _sync_drain(peer: str, path: Path, events: list[Any], groups: int) -> tuple[float, float]:
    t = _sync_transport(peer, path)
    try:
        t0 = time.perf_counter()
        for i, event in enumerate(events):
            t.publish(f"g{i % groups}", event)
        t1 = time.perf_counter()
        done = claim_and_ack_all(t)
        t2 = time.perf_counter()
    finally:
        t.close()
    assert done == len(events), (peer, done)
    return len(events) / (t1 - t0), len(events) / (t2 - t1)


async def _async_drain(peer: str, path: Path, events: list[Any], groups: int) -> float:
    t = await _async_transport(peer, path)
    try:
        for i, event in enumerate(events):
            await t.publish(f"g{i % groups}", event)
        t0 = time.perf_counter()
        done = 0
        while (lease := await t.claim("w", VISIBILITY)) is not None:
            await t.ack(lease)
            done += 1
        elapsed = time.perf_counter() - t0
    finally:
        await t.close()
    assert done == len(events), (peer, done)
    return len(events) / elapsed


def _engine(peer: str, folder: Path, executions: int) -> float:
    """Executions per second processed by harel's Worker (each: Start and three events)."""
    from harel import Event, SqliteStore, definition_from_dsl
    from harel.engine.distributed import DistributedRunner

    definition = definition_from_dsl(MACHINE, "order")
    store = SqliteStore(folder / "store.db")
    transport = _sync_transport(peer, folder / "queue.db")
    try:
        runner = DistributedRunner(
            store, transport, {definition.id: definition}, execution="inline"
        )
        ids = []
        for _ in range(executions):
            execution = runner.create(definition.id)
            for kind in ("Pick", "Pack", "Ship"):
                runner.send(execution.id, Event(kind=kind))
            ids.append(execution.id)
        worker = runner.worker(worker_id="w")
        t0 = time.perf_counter()
        while worker.step():
            pass
        elapsed = time.perf_counter() - t0
        assert all(store.load(i).outcome == "success" for i in ids), peer
    finally:
        transport.close()
        store.close()
    return executions / elapsed


def run(cfg: Config) -> dict[str, Any]:
    n, groups, executions = cfg.size(400, 3000), cfg.size(20, 100), cfg.size(40, 300)
    events = _events(n)
    phases = ("publish", "drain", "async drain", "engine")
    out: dict[str, Any] = {"n": n, "groups": groups, "executions": executions}
    out.update({phase: {peer: [] for peer in PEERS} for phase in phases})
    for rep in range(cfg.reps):
        for peer in _order(rep):
            publish, drain = _sync_drain(peer, cfg.fresh(f"harel-{peer}"), events, groups)
            out["publish"][peer].append(publish)
            out["drain"][peer].append(drain)
        for peer in _order(rep):
            path = cfg.fresh(f"harel-async-{peer}")
            out["async drain"][peer].append(asyncio.run(_async_drain(peer, path, events, groups)))
        for peer in _order(rep):
            folder = cfg.fresh(f"harel-engine-{peer}").parent
            out["engine"][peer].append(_engine(peer, folder, executions))
        cfg.log(f"  harel rep {rep + 1}/{cfg.reps} done")
    return out


def targets(w: dict[str, Any]) -> list[Row]:
    ours, theirs = w["drain"][OURS], w["drain"][THEIRS]
    x = ratios(ours, theirs)
    # The verdict reads the repetitions' ratios (each between drains run back to back); the
    # ratio of the two medians is shown beside it, since fsync noise can part the two.
    figures = f"{fmt_ratio(x)} (of the medians: {med(ours) / med(theirs):.2f}{X})"
    label = f"Drain (claim+ack) ≥ 0.95{X} harel's own SqliteTransport"
    return [(label, figures, verdict(med(x) >= 0.95))]


def section(w: dict[str, Any]) -> list[str]:
    rows = [
        (f"{phase}, harel_sa ÷ harel", fmt_ratio(ratios(w[phase][OURS], w[phase][THEIRS])), "")
        for phase in ("publish", "async drain", "engine")
    ]
    return summary(
        "7. Against the harel engine's own transports (harel 0.9.0)",
        f"{w['n']:,} events over {w['groups']} groups published, then drained, through harel's"
        " `SqliteTransport` and harel_sa's (FULL); `engine`: harel's `Worker` on each.",
        [*targets(w), *rows],
    )

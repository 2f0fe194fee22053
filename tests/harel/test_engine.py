"""harel's engine on harel_sa's transports, built exactly as harel builds its own: its runner
starts executions and sends events, its workers process them, on its own SQLite store. The same
workload runs on harel's own transport in the same test, as the baseline."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from harel import SqliteStore
from harel.engine.aio.distributed import AsyncDistributedRunner, AsyncWorker
from harel.engine.aio_store import AsyncSqliteStore
from harel.engine.aio_transport import AsyncSqliteTransport as HarelAsyncTransport
from harel.engine.distributed import DistributedRunner
from harel.engine.transport import SqliteTransport as HarelTransport

import harel_sa
from tests.conftest import FakeClock
from tests.harel import engine


def leftovers(queue: Path) -> tuple[int, int, int]:
    """Messages and groups left in the queue file, and dead letters (harel_sa's table)."""
    with sqlite3.connect(queue) as raw:
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        count = lambda t: raw.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # noqa: E731
        dead = count("harel_transport_dead") if "harel_transport_dead" in tables else 0
        return count("harel_transport_messages"), count("harel_transport_groups"), dead


def run_sync(
    folder: Path, transport_type: Any, execution: str, **policy: Any
) -> list[tuple[object, ...]]:
    """The workload on harel's sync ``Worker``; ``policy``: its claim policy (``high_ratio``,
    ``priority_threshold``), by default half the claims asking for priority >= 1 first."""
    folder.mkdir()
    clock = FakeClock(start=1_700_000_000.0)
    store = SqliteStore(folder / "store.db")
    transport = transport_type(folder / "queue.db", clock)  # harel's positional order
    try:
        runner = DistributedRunner(
            store, transport, engine.definitions(), clock=clock, execution=execution
        )
        ids = engine.start(runner)
        # high_ratio: half the claims ask for priority >= 1 first, as harel's policy does
        worker = runner.worker(worker_id="w1", clock=clock, **(policy or {"high_ratio": 0.5}))

        def finished() -> bool:
            return all(store.load(i).status.name == "DONE" for i in ids)

        engine.drive(worker, clock, finished)
        return [engine.summary(store.load(i)) for i in ids]
    finally:
        transport.close()
        store.close()


@pytest.mark.parametrize("execution", ["background", "inline"])
def test_harels_worker_runs_the_workload_on_harel_sa(tmp_path: Path, execution: str) -> None:
    baseline = run_sync(tmp_path / "harel", HarelTransport, execution)
    ours = run_sync(tmp_path / "harel_sa", harel_sa.SqliteTransport, execution)
    assert baseline == [engine.EXPECTED] * engine.EXECUTIONS
    assert ours == baseline
    assert leftovers(tmp_path / "harel" / "queue.db") == (0, 0, 0)
    assert leftovers(tmp_path / "harel_sa" / "queue.db") == (0, 0, 0)


@pytest.mark.parametrize("execution", ["background", "inline"])
def test_a_priority_threshold_above_every_priority_drains_as_on_harels_transport(
    tmp_path: Path, execution: str
) -> None:
    """Every claim asks for priority >= 5 first (which no group has: harel's transport finds
    nothing), then falls back to any priority."""
    policy = {"high_ratio": 1.0, "priority_threshold": 5}
    baseline = run_sync(tmp_path / "harel", HarelTransport, execution, **policy)
    ours = run_sync(tmp_path / "harel_sa", harel_sa.SqliteTransport, execution, **policy)
    assert baseline == [engine.EXPECTED] * engine.EXECUTIONS
    assert ours == baseline
    assert leftovers(tmp_path / "harel_sa" / "queue.db") == (0, 0, 0)


def empty_execution_id(folder: Path, transport_type: Any) -> list[object]:
    """An execution created with ``execution_id=""``: its events go to the group ``""``."""
    folder.mkdir()
    clock = FakeClock(start=1_700_000_000.0)
    store = SqliteStore(folder / "store.db")
    transport = transport_type(folder / "queue.db", clock)
    try:
        runner = DistributedRunner(store, transport, engine.definitions(), clock=clock)
        execution = runner.create("order", execution_id="")
        runner.send("", engine.Event(kind="Go", data={"item": "x"}))
        runner.send("", engine.Event(kind="Finish"))
        with sqlite3.connect(folder / "queue.db") as raw:
            queued = raw.execute(
                "SELECT group_id FROM harel_transport_messages ORDER BY seq"
            ).fetchall()
        worker = runner.worker(worker_id="w1", clock=clock)
        engine.drive(worker, clock, lambda: store.load("").status.name == "DONE")
        return [execution.id, queued, engine.summary(store.load(""))]
    finally:
        transport.close()
        store.close()


def test_an_execution_with_an_empty_id_completes_as_on_harels_transport(tmp_path: Path) -> None:
    baseline = empty_execution_id(tmp_path / "harel", HarelTransport)
    ours = empty_execution_id(tmp_path / "harel_sa", harel_sa.SqliteTransport)
    assert baseline == ["", [("",), ("",), ("",)], engine.EXPECTED]  # Start, Go, Finish
    assert ours == baseline
    assert leftovers(tmp_path / "harel_sa" / "queue.db") == (0, 0, 0)


async def run_async(folder: Path, open_transport: Any) -> list[tuple[object, ...]]:
    folder.mkdir()
    clock = FakeClock(start=1_700_000_000.0)
    store = await AsyncSqliteStore.create(str(folder / "store.db"))
    transport = await open_transport(str(folder / "queue.db"), clock)
    try:
        runner = AsyncDistributedRunner(store, transport, engine.definitions(), clock)
        ids = []
        for n in range(engine.EXECUTIONS):
            execution = await runner.create("order", priority=n % 3)
            await runner.send(execution.id, engine.Event(kind="Go", data={"item": f"i{n}"}))
            await runner.send(execution.id, engine.Event(kind="Finish"))
            ids.append(execution.id)
        worker = AsyncWorker(
            store, transport, engine.definitions(), "w1", 30.0, 5.0, clock, high_ratio=0.5
        )

        async def finished() -> bool:
            loaded = [await store.load(i) for i in ids]
            return all(e.status.name == "DONE" for e in loaded)

        await engine.drive_async(worker, clock, finished)
        return [engine.summary(await store.load(i)) for i in ids]
    finally:
        await transport.close()
        await store.close()


def test_harels_async_worker_runs_the_workload_on_harel_sa(tmp_path: Path) -> None:
    async def both() -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
        baseline = await run_async(tmp_path / "harel", HarelAsyncTransport.create)
        ours = await run_async(tmp_path / "harel_sa", harel_sa.AsyncSqliteTransport.create)
        return baseline, ours

    baseline, ours = asyncio.run(both())
    assert baseline == [engine.EXPECTED] * engine.EXECUTIONS
    assert ours == baseline
    assert leftovers(tmp_path / "harel" / "queue.db") == (0, 0, 0)
    assert leftovers(tmp_path / "harel_sa" / "queue.db") == (0, 0, 0)


def suspend_and_resume(folder: Path, transport_type: Any) -> list[object]:
    """The control plane's park: an event for a suspended execution is nacked with a delay,
    its group stays blocked until then, and after resume it is processed."""
    folder.mkdir()
    clock = FakeClock(start=1_700_000_000.0)
    store = SqliteStore(folder / "store.db")
    transport = transport_type(folder / "queue.db", clock)
    seen: list[object] = []
    try:
        runner = DistributedRunner(store, transport, engine.definitions(), clock=clock)
        worker = runner.worker(worker_id="w1", clock=clock, suspend_recheck=5.0)
        execution = runner.create("order")
        while worker.step():
            pass
        runner.suspend(execution.id)
        runner.send(execution.id, engine.Event(kind="Go", data={"item": "x"}))
        seen.append(worker.step())  # claimed, found suspended, parked for 5 s
        with sqlite3.connect(folder / "queue.db") as raw:
            seen.append(
                raw.execute(
                    "SELECT locked_by, lock_expiry FROM harel_transport_messages"
                ).fetchall()
            )
        seen.append(worker.step())  # its group is blocked: nothing to claim
        runner.resume(execution.id)
        seen.append(worker.step())  # still parked
        clock.advance(6)
        runner.send(execution.id, engine.Event(kind="Finish"))
        engine.drive(worker, clock, lambda: store.load(execution.id).status.name == "DONE")
        seen.append(engine.summary(store.load(execution.id)))
        return seen
    finally:
        transport.close()
        store.close()


def test_a_suspended_executions_event_is_parked_as_on_harels_transport(tmp_path: Path) -> None:
    baseline = suspend_and_resume(tmp_path / "harel", HarelTransport)
    ours = suspend_and_resume(tmp_path / "harel_sa", harel_sa.SqliteTransport)
    assert baseline == [True, [("__parked__", 1_700_000_005.0)], False, False, engine.EXPECTED]
    assert ours == baseline

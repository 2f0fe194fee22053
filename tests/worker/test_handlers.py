"""Handlers by kind (issue 57): :class:`harel_sa.Handlers` and :class:`harel_sa.AsyncHandlers`
as a real worker's handler on a SQLite file: each kind to its function, an unknown kind to the
default or the dead table (a reason naming it), bad handlers refused when added; and the same
router as ``harel-sa worker MODULE:NAME`` in a real process."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from harel_sa import (
    AsyncHandlers,
    AsyncSqliteTransport,
    AsyncWorker,
    Event,
    Handlers,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    Lease,
    SqliteTransport,
    Worker,
)
from tests.cli.conftest import ROOT


def publish(path: Path, *kinds: str) -> None:
    with SqliteTransport(path) as q:
        for n, kind in enumerate(kinds):
            q.publish(f"g{n}", Event(kind=kind))


def test_a_worker_runs_each_kinds_handler_and_dead_letters_an_unknown_kind(
    tmp_path: Path,
) -> None:
    path = tmp_path / "q.db"
    publish(path, "order.paid", "order.refunded", "order.paid", "mystery")
    seen: list[tuple[str, str]] = []
    handlers = Handlers({"order.paid": lambda lease: seen.append(("paid", lease.group_id))})

    @handlers.on("order.refunded")
    def refunded(lease: Lease[Event]) -> None:
        seen.append(("refunded", lease.group_id))

    assert handlers.kinds == ("order.paid", "order.refunded")
    with SqliteTransport(path) as q:
        stats = Worker(q, handlers, handle_signals=False).run(until_empty=True)
        assert sorted(seen) == [("paid", "g0"), ("paid", "g2"), ("refunded", "g1")]
        assert (stats.succeeded, stats.dead_lettered) == (3, 1)
        [dead] = q.dead()
        assert dead.group_id == "g3" and "no handler for kind 'mystery'" in dead.error
        assert "'order.paid', 'order.refunded'" in dead.error


def test_a_default_takes_the_unknown_kinds(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    publish(path, "a", "b")
    rest: list[str] = []
    handlers = Handlers(
        {"a": lambda lease: None}, default=lambda lease: rest.append(lease.event.kind)
    )
    with SqliteTransport(path) as q:
        assert Worker(q, handlers, handle_signals=False).run(until_empty=True).succeeded == 2
    assert rest == ["b"]


def test_async_handlers_in_an_async_worker(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    publish(path, "x", "y", "z")
    seen: list[str] = []
    handlers = AsyncHandlers()

    @handlers.on("x")
    async def on_x(lease: Lease[Event]) -> None:
        await asyncio.sleep(0)
        seen.append("x")

    async def on_y(lease: Lease[Event]) -> None:
        seen.append("y")

    handlers.add("y", on_y)

    async def main() -> Any:
        q = await AsyncSqliteTransport.create(path)
        try:
            return await AsyncWorker(q, handlers, handle_signals=False).run(until_empty=True)
        finally:
            await q.close()

    stats = asyncio.run(main())
    assert sorted(seen) == ["x", "y"] and (stats.succeeded, stats.dead_lettered) == (2, 1)


class Paid(BaseModel):
    type: str
    cents: int


def test_the_kind_is_read_as_kind_says(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    with SqliteTransport(path, event_type=Paid) as q:
        q.publish("g", Paid(type="card", cents=5))
        q.publish("h", Paid(type="cash", cents=7))
        cents: list[int] = []
        handlers = Handlers(
            {"card": lambda lease: cents.append(lease.event.cents)}, kind=lambda e: e.type
        )
        stats = Worker(q, handlers, handle_signals=False).run(until_empty=True)
        assert cents == [5] and stats.dead_lettered == 1
        assert "no handler for kind 'cash'" in q.dead()[0].error


def sync_handler(lease: Lease[Event]) -> None:
    pass


async def async_handler(lease: Lease[Event]) -> None:
    pass


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: Handlers({"": sync_handler}), InvalidArgumentTypeError),
        (lambda: Handlers({"a": 42}), InvalidArgumentTypeError),  # type: ignore[dict-item]
        (lambda: Handlers({"a": lambda: None}), InvalidArgumentTypeError),
        (lambda: Handlers({"a": async_handler}), InvalidArgumentTypeError),
        (lambda: AsyncHandlers({"a": sync_handler}), InvalidArgumentTypeError),  # type: ignore[dict-item]
        (lambda: Handlers(default=async_handler), InvalidArgumentTypeError),
        (lambda: Handlers(kind="kind"), InvalidArgumentTypeError),  # type: ignore[arg-type]
    ],
)
def test_bad_handlers_are_refused_when_added(make: Any, error: type) -> None:
    with pytest.raises(error):
        make()


def test_a_kind_has_one_handler() -> None:
    handlers = Handlers({"a": sync_handler})
    with pytest.raises(InvalidArgumentError, match="'a' has a handler already"):
        handlers.on("a")(sync_handler)


ROUTER_APP = """
from harel_sa import AsyncHandlers, Handlers

handlers = Handlers()

@handlers.on("greet")
def greet(lease):
    print("greeted", lease.group_id, flush=True)

async_handlers = AsyncHandlers()

@async_handlers.on("greet")
async def greet_async(lease):
    print("async greeted", lease.group_id, flush=True)
"""


@pytest.mark.parametrize("name", ["handlers", "async_handlers"])
def test_the_worker_command_takes_a_router(tmp_path: Path, name: str) -> None:
    (tmp_path / "app.py").write_text(ROUTER_APP)
    publish(tmp_path / "queue.db", "greet", "unknown")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harel_sa",
            "worker",
            f"app:{name}",
            "--db",
            "queue.db",
            "--until-empty",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert ("async greeted g0" if name.startswith("async") else "greeted g0") in done.stdout
    assert "succeeded=1" in done.stderr and "dead_lettered=1" in done.stderr

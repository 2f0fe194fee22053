"""``harel_sa.sqlite.aio.in_thread`` reaches private names of aiosqlite: the queue its thread
serves (``Connection._tx``, of ``(future, function)`` pairs, as ``Connection._execute`` puts
them), whether the connection runs (``_running``, ``_connection``) and the sqlite3 connection
there (``Connection._conn``). This holds them to the installed aiosqlite, and says which version
broke them if a release renames them."""

from __future__ import annotations

import asyncio
import importlib.metadata
import inspect
import sqlite3
import threading
from pathlib import Path

import aiosqlite
import pytest

from harel_sa.sqlite.aio import in_thread

VERSION = importlib.metadata.version("aiosqlite")
FOLLOW = "harel_sa.sqlite.aio.in_thread must follow it"


def test_aiosqlite_still_puts_a_future_and_a_function_on_its_threads_queue() -> None:
    execute = inspect.getsource(aiosqlite.Connection._execute)
    assert "self._tx.put_nowait((future, function))" in execute, (
        f"aiosqlite {VERSION}'s Connection._execute no longer queues (future, function) on"
        f" _tx: {FOLLOW}"
    )
    assert "if not self._running or not self._connection" in execute, (
        f"aiosqlite {VERSION}'s Connection._execute checks another state: {FOLLOW}"
    )


def test_in_thread_runs_on_the_sqlite3_connection_in_aiosqlites_thread(tmp_path: Path) -> None:
    async def main() -> tuple[int, object, int]:
        conn = await aiosqlite.connect(tmp_path / "q.db")
        try:
            raw = getattr(conn, "_conn", None)
            assert isinstance(raw, sqlite3.Connection), (
                f"aiosqlite {VERSION}'s Connection._conn is not the sqlite3 connection: {FOLLOW}"
            )
            seen = await in_thread(conn, lambda c: (threading.get_ident(), c, 1))
            return seen[0], seen[1], threading.get_ident()
        finally:
            await conn.close()

    thread, connection, loop_thread = asyncio.run(main())
    assert isinstance(connection, sqlite3.Connection)
    assert thread != loop_thread  # in aiosqlite's own thread, not the loop's


def test_in_thread_refuses_a_closed_connection_and_reports_the_functions_error(
    tmp_path: Path,
) -> None:
    def fail(c: sqlite3.Connection) -> None:
        raise sqlite3.OperationalError("boom")

    async def main() -> None:
        conn = await aiosqlite.connect(tmp_path / "q.db")
        try:
            with pytest.raises(sqlite3.OperationalError, match="boom"):
                await in_thread(conn, fail)
        finally:
            await conn.close()
        with pytest.raises(ValueError, match="closed"):  # nobody would serve it: no hang
            in_thread(conn, lambda c: 1)

    asyncio.run(main())

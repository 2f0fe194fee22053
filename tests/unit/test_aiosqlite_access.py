"""``harel_sa.sqlite.aio.in_thread`` reaches two private names of aiosqlite
(``Connection._execute``, the hop into its thread, and ``Connection._conn``, the sqlite3
connection there). This holds them to the installed aiosqlite, and says which version broke
them if a release renames them."""

from __future__ import annotations

import asyncio
import importlib.metadata
import inspect
import sqlite3
import threading
from pathlib import Path

import aiosqlite

from harel_sa.sqlite.aio import in_thread

VERSION = importlib.metadata.version("aiosqlite")
FOLLOW = "harel_sa.sqlite.aio.in_thread must follow it"


def test_aiosqlite_still_has_the_hop_into_its_thread() -> None:
    execute = getattr(aiosqlite.Connection, "_execute", None)
    assert execute is not None, f"aiosqlite {VERSION} has no Connection._execute: {FOLLOW}"
    assert inspect.iscoroutinefunction(execute), (
        f"aiosqlite {VERSION}'s Connection._execute is no longer a coroutine: {FOLLOW}"
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

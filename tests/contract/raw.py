"""A connection that writes and reads rows "as another program would", on either dialect.

The contract tests poke rows behind the transport's back through ``raw``: a plain sqlite3
connection on a SQLite kind, a :class:`PgRaw` (a plain psycopg connection on the same
database) on a PostgreSQL kind. The tests write their SQL once, in the subset both servers
take (``?`` marks, ``BEGIN``/``COMMIT``, ``INSERT … ON CONFLICT DO NOTHING``, ``RETURNING``);
:class:`PgRaw` only changes the marks to psycopg's and ``BEGIN IMMEDIATE`` to ``BEGIN``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Protocol


class Cursor(Protocol):
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Any: ...


class Raw(Protocol):
    """What the tests call on ``raw``: sqlite3's connection methods they use."""

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Cursor: ...
    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> Any: ...
    def close(self) -> None: ...


def pg_sql(sql: str) -> str:
    """``sql`` as psycopg takes it: ``%s`` marks (a literal ``%`` doubled)."""
    if sql.strip().upper() == "BEGIN IMMEDIATE":
        return "BEGIN"
    return sql.replace("%", "%%").replace("?", "%s")


class PgRaw:
    """A plain psycopg connection (autocommit) on a PostgreSQL kind's database."""

    def __init__(self, url: str) -> None:
        import psycopg

        self._conn = psycopg.connect(url, autocommit=True)

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> Any:
        return self._conn.execute(pg_sql(sql), tuple(params))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> None:
        with self._conn.cursor() as cur:
            cur.executemany(pg_sql(sql), [tuple(r) for r in rows])

    def close(self) -> None:
        self._conn.close()


def connect(url: str | None, path: str) -> Raw:
    """``raw`` for a test: on ``url`` (PostgreSQL) or the SQLite file ``path``."""
    if url is None:
        return sqlite3.connect(path, isolation_level=None)
    return PgRaw(url)

"""A publish in the application's own transaction against the application writing the same
rows itself in that transaction (issue 39): ``conn.execute`` of the message and group inserts
on the application's engine, then ``commit``, against ``Outbox.publish(conn, ...)`` then
``commit``; SQLite (a file, the engine's defaults) and PostgreSQL (psycopg 3), one
transaction per message, turns alternating.

    .venv/bin/python bench/run.py --only outbox --merge
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from common import Config, Row, X, fmt_ratio, med, summary, verdict
from pg_server import Server
from sqlalchemy import Connection, Engine, create_engine, text

from harel_sa import Event, Outbox, SqliteTransport

EVENT = Event(kind="order.paid", data={"order": 1, "total": 42})


def _by_hand(dialect: str) -> Callable[[Connection, str], None]:
    """The application writing the rows a publish writes, itself, as SQLAlchemy ``text()``."""
    json = EVENT.model_dump_json()
    if dialect == "sqlite":
        message = text(
            "INSERT INTO harel_transport_messages (group_id, event, enqueued_at) "
            "VALUES (:group_id, :event, :now)"
        )
        group = text("INSERT OR IGNORE INTO harel_transport_groups (group_id) VALUES (:group_id)")
    else:
        message = text(
            "INSERT INTO harel_transport_messages (group_id, event, enqueued_at) "
            "VALUES (:group_id, :event, extract(epoch from statement_timestamp()))"
        )
        group = text(
            "INSERT INTO harel_transport_groups (group_id) VALUES (:group_id) "
            "ON CONFLICT (group_id) DO UPDATE SET priority = harel_transport_groups.priority"
        )

    def write(conn: Connection, group_id: str) -> None:
        conn.execute(message, {"group_id": group_id, "event": json, "now": time.time()})
        conn.execute(group, {"group_id": group_id})

    return write


def _drive(engine: Engine, n: int, write: Callable[[Connection, str], None]) -> float:
    """Seconds for ``n`` application transactions, each one ``write`` and a commit."""
    with engine.connect() as conn:
        began = time.perf_counter()
        for i in range(n):
            write(conn, f"g{i % 100}")
            conn.commit()
        return time.perf_counter() - began


def _measure(cfg: Config, url: str, n: int) -> dict[str, list[float]]:
    engine = create_engine(url)
    by_hand, outbox = _by_hand(engine.dialect.name), Outbox()
    rates: dict[str, list[float]] = {"by_hand": [], "outbox": [], "ratio": []}
    try:
        for rep in range(cfg.reps):
            kinds = [("by_hand", by_hand), ("outbox", lambda c, g: outbox.publish(c, g, EVENT))]
            took = {}
            for name, write in kinds if rep % 2 == 0 else kinds[::-1]:
                took[name] = _drive(engine, n, write)
                rates[name].append(n / took[name])
            rates["ratio"].append(took["outbox"] / took["by_hand"])
            cfg.log(f"  outbox {engine.dialect.name}: {took['outbox'] / took['by_hand']:.3f}x")
    finally:
        engine.dispose()
    return rates


def run(cfg: Config) -> dict[str, Any]:
    n = cfg.size(300, 3_000)
    path = cfg.fresh("outbox")
    SqliteTransport(path).close()
    out: dict[str, Any] = {"n": n, "sqlite": _measure(cfg, f"sqlite:///{path}", n)}
    server = Server(cfg.workdir)
    try:
        url = server.database()
        from harel_sa import PostgresTransport

        PostgresTransport(url).close()
        pg_url = url.replace("postgresql://", "postgresql+psycopg://")
        out["postgresql"] = _measure(cfg, pg_url, n)
    finally:
        server.stop()
    return out


#: The target: a publish in the application's transaction at most this many times the time of
#: the application writing the same rows itself.
LIMIT = 1.2


def targets(w: dict[str, Any]) -> list[Row]:
    return [
        (
            f"`Outbox.publish` ÷ own `INSERT`s ({dialect}, time) ≤ {LIMIT}{X}",
            fmt_ratio(w[dialect]["ratio"]),
            verdict(med(w[dialect]["ratio"]) <= LIMIT),
        )
        for dialect in ("sqlite", "postgresql")
    ]


def section(w: dict[str, Any]) -> list[str]:
    return summary(
        "A publish in the application's transaction (issue 39)",
        f"{w['n']:,} transactions on the application's engine, each writing a message and"
        " committing: its own `INSERT`s of the rows against `Outbox.publish(conn, ...)`.",
        targets(w),
    )

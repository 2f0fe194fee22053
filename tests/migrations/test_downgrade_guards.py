"""Every downgrade guard on its own (issue 45, point 4): each revision that would destroy rows
refuses an unforced step, changing none of them, and lets them go only when forced; on SQLite
and on a real PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from alembic.util import CommandError
from sqlalchemy import create_engine, text

from harel_sa import Event, Names, SqliteTransport
from harel_sa import migrations as mig

NAMES = Names()

#: guard -> (the revision the step goes down to, what to plant, what it would destroy, the rows)
GUARDS: dict[str, tuple[str, str, str, str]] = {
    "0001 messages": (
        "base",
        "",
        "queued or in-flight message",
        f"SELECT count(*) FROM {NAMES.messages}",
    ),
    "0002 routing keys": (
        "harel_sa_0001",
        f"UPDATE {NAMES.groups} SET routing_key = 'gpu'",
        "group routing key",
        f"SELECT count(*) FROM {NAMES.groups} WHERE routing_key IS NOT NULL",
    ),
    "0003 dead letters": (
        "harel_sa_0002",
        "DEAD",
        "dead letter",
        f"SELECT count(*) FROM {NAMES.dead}",
    ),
    "0003 delivery counts": (
        "harel_sa_0002",
        f"UPDATE {NAMES.messages} SET deliveries = 3",
        "message delivery count",
        f"SELECT count(*) FROM {NAMES.messages} WHERE deliveries > 0",
    ),
}


def transport(url: str) -> Any:
    if url.startswith("sqlite"):
        return SqliteTransport(url)
    from harel_sa import PostgresTransport

    return PostgresTransport(url)


def sql(url: str, statement: str) -> Any:
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.begin() as conn:
            result = conn.execute(text(statement))
            return result.scalar() if result.returns_rows else None
    finally:
        engine.dispose()


@pytest.mark.parametrize("guard", list(GUARDS))
@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_each_guarded_step_keeps_its_rows_unless_forced(
    dialect: str, guard: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    url = (
        str(request.getfixturevalue("pg_url"))
        if dialect == "postgresql"
        else f"sqlite:///{tmp_path / 'q.db'}"
    )
    down_to, plant, destroys, rows = GUARDS[guard]
    mig.upgrade(url)
    with transport(url) as q:
        q.publish("g", Event(kind="one"), routing_key=None)
        q.publish("h", Event(kind="two"))
        if plant == "DEAD":
            assert q.dead_letter(q.claim("w", 30.0), "given up")
    if plant and plant != "DEAD":
        sql(url, plant)
    # Only this guard's rows: the guards of the steps on the way down must let it pass.
    if guard != "0001 messages":
        if guard != "0003 dead letters":
            sql(url, f"DELETE FROM {NAMES.dead}")
        if guard != "0003 delivery counts":
            sql(url, f"UPDATE {NAMES.messages} SET deliveries = 0")
        if guard != "0002 routing keys":
            sql(url, f"UPDATE {NAMES.groups} SET routing_key = NULL")
    before = sql(url, rows)
    assert before > 0

    with pytest.raises(CommandError, match=f"would destroy {before} {destroys}"):
        mig.downgrade(url, down_to)
    assert sql(url, rows) == before  # not one of them went
    mig.downgrade(url, down_to, force=True)
    assert mig.current(url) == (() if down_to == "base" else (down_to,))

"""Scheduled and keyed publishes and cancel on the application's connection (issue 44): they
take effect with its commit, a rollback leaves nothing; SQLite and PostgreSQL (psycopg 3 and
psycopg2), through the transport's ``connection=``."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine

from harel_sa import Event
from tests.outbox.test_outbox import engine, queue, url  # noqa: F401  (fixtures)


def test_scheduled_keyed_and_cancel_commit_with_the_application(
    engine: Engine,  # noqa: F811
    queue: Any,  # noqa: F811
) -> None:
    with engine.connect() as conn:
        assert queue.publish("g", Event(kind="later"), delay=3600, connection=conn) is True
        assert queue.publish("g", Event(kind="k1"), key="K", connection=conn) is True
        assert (
            queue.publish("g", Event(kind="k2"), key="K", on_key="replace", connection=conn)
            is False
        )
        conn.rollback()
    assert queue.stats().scheduled == 0 and queue.stats().messages == 0
    with engine.connect() as conn:
        queue.publish("g", Event(kind="later"), delay=3600, connection=conn)
        assert queue.publish("g", Event(kind="k1"), key="K", connection=conn) is True
        assert (
            queue.publish("g", Event(kind="k2"), key="K", on_key="replace", connection=conn)
            is False
        )
        queue.publish_many([("h", Event(kind="m"))], delay=60, connection=conn)
        conn.commit()
    stats = queue.stats()
    assert stats.scheduled == 2 and stats.messages == 1
    lease = queue.claim("w", 30.0)
    assert lease is not None and lease.event.kind == "k2"
    queue.ack(lease)
    queue.publish("g", Event(kind="timer"), key="T", delay=60)
    with engine.connect() as conn:
        assert queue.cancel("T", connection=conn) is True
        conn.commit()
    assert queue.stats().scheduled == 2

"""A keyed publish on PostgreSQL is one statement under the key's advisory lock, sent with the
lock in one round trip: it sees what the lock's last holder committed, and when the waiting
message it found changes under it (claimed, or promoted by a claim) before ``replace`` could
change it, it looks again rather than drop the event or write a second waiting message."""

from __future__ import annotations

import threading
from typing import Any

import psycopg

from harel_sa import Event, PostgresTransport, QueuedMessage
from harel_sa.postgres.scheduling import scheduling_for
from harel_sa.schema import Names


def kind(message: QueuedMessage) -> str:
    return Event.model_validate_json(message.event).kind


def _held(pg_url: str, sql: str, then: Any) -> Any:
    """Run ``sql`` in a transaction of another connection, call ``then`` (which waits on the
    rows that transaction locked), and commit the transaction 0.3 s after."""
    with psycopg.connect(pg_url) as other:
        other.execute(sql)
        timer = threading.Timer(0.3, other.commit)
        timer.start()
        try:
            return then()
        finally:
            timer.join()


def test_a_replace_whose_scheduled_message_was_promoted_meanwhile_replaces_it_queued(
    pg_url: str,
) -> None:
    m, s = "harel_transport_messages", "harel_transport_scheduled"
    with PostgresTransport(pg_url) as q:
        assert q.publish("g", Event(kind="old"), key="K", delay=3600) is True
        # A promotion in flight: the scheduled row is moved to the queue, not yet committed.
        promote = (
            f"INSERT INTO harel_transport_groups (group_id) VALUES ('g'); "
            f"INSERT INTO {m} (group_id, event, enqueued_at, message_key) "
            f"SELECT group_id, event, 0, message_key FROM {s}; DELETE FROM {s}"
        )
        wrote = _held(
            pg_url, promote, lambda: q.publish("g", Event(kind="new"), key="K", on_key="replace")
        )
        assert wrote is False
        shown = q.peek(scheduled=True)
        assert [(m.state, kind(m)) for m in shown] == [("ready", "new")]


def test_a_replace_whose_queued_message_was_claimed_meanwhile_writes_a_new_one(
    pg_url: str,
) -> None:
    with PostgresTransport(pg_url) as q:
        assert q.publish("g", Event(kind="old"), key="K") is True
        claim = (
            "UPDATE harel_transport_messages SET locked_by = 'w#1', "
            "lock_expiry = date_part('epoch', now()) + 60"
        )
        wrote = _held(
            pg_url, claim, lambda: q.publish("g", Event(kind="new"), key="K", on_key="replace")
        )
        assert wrote is True  # the old one is in flight: the work asked for now is written
        assert [kind(m) for m in q.peek()] == ["old", "new"]


def test_a_keyed_publish_sees_what_the_keys_last_holder_committed(pg_url: str) -> None:
    """Another session's keyed publish, committed while this one waited for the key's lock
    (in one statement, the snapshot would predate the lock and a second message be written)."""
    with PostgresTransport(pg_url) as q:
        lock = scheduling_for(Names("harel"), "x").key_lock("K")
        other = (
            f"SELECT pg_advisory_xact_lock({lock}); "
            "INSERT INTO harel_transport_groups (group_id) VALUES ('g'); "
            "INSERT INTO harel_transport_messages (group_id, event, enqueued_at, message_key) "
            f"VALUES ('g', '{Event(kind='theirs').model_dump_json()}', 0, 'K')"
        )
        assert _held(pg_url, other, lambda: q.publish("g", Event(kind="mine"), key="K")) is False
        assert [kind(m) for m in q.peek(scheduled=True)] == ["theirs"]
        assert q.cancel("K") is True and q.stats().messages == 0

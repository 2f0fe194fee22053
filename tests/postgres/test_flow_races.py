"""Pauses against what runs at the same time on PostgreSQL, with real sessions.

``resume`` waits for a transaction that made a group of the paused target to end (that group
was made before the walk's start), then moves it back: no group stays where no claim looks.
A ``pause`` returns only after the claims holding its groups committed, and a claim that meets
a group after its move leaves it: nothing of a paused key starts after ``pause`` returns.
"""

from __future__ import annotations

import threading
import time

from sqlalchemy import create_engine

from harel_sa import Event, PostgresTransport
from tests.postgres.test_transport import sql

VIS = 30.0


def test_resume_waits_for_a_publish_that_saw_the_pause_and_frees_its_group(pg_url: str) -> None:
    q = PostgresTransport(pg_url, prefix="races")
    engine = create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        q.pause(routing_key="k")
        done = threading.Event()
        with engine.connect() as conn:
            # The application's transaction: a new group of the paused key, not committed.
            q.publish("late", Event(kind="late"), routing_key="k", connection=conn)
            resumer = threading.Thread(target=lambda: (q.resume(routing_key="k"), done.set()))
            resumer.start()
            assert not done.wait(0.5)  # resume waits for the application's commit
            conn.commit()
        assert done.wait(10)
        resumer.join()
        lease = q.claim("w", VIS)
        assert lease is not None and lease.group_id == "late"
    finally:
        engine.dispose()
        q.close()


def test_nothing_of_a_paused_key_is_leased_after_pause_returns(pg_url: str) -> None:
    q = PostgresTransport(pg_url, prefix="races2", pool_size=6)
    q.publish_many([(f"g{i}", Event(kind="x")) for i in range(400)], routing_key="k")
    leased: list[tuple[float, str]] = []
    stop = threading.Event()

    def claimer() -> None:
        while not stop.is_set():
            started = time.monotonic()  # a claim begun after pause returned must get nothing
            lease = q.claim("w", VIS)
            if lease is not None:
                leased.append((started, lease.group_id))
                time.sleep(0.001)

    threads = [threading.Thread(target=claimer) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        time.sleep(0.05)
        q.pause(routing_key="k")
        paused_at = time.monotonic()
        time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join()
    try:
        late = [g for at, g in leased if at > paused_at]
        assert leased and not late
        left = sql(pg_url, "SELECT count(*) FROM races2_transport_messages WHERE locked_by IS NULL")
        assert left[0][0] > 0  # the pause came before the backlog was drained
    finally:
        q.close()


def test_a_producer_that_has_not_heard_of_a_pause_yet(pg_url: str) -> None:
    """A producer told a moment ago that nothing is paused publishes the plain way: the group
    it makes of a key paused since is held by the claims all the same, and is claimed after
    the resume. Once its trust runs out it asks again, and groups it makes are paused ones."""
    worker = PostgresTransport(pg_url, prefix="heard")
    producer = PostgresTransport(pg_url, prefix="heard")
    try:
        producer.publish("warm", Event(kind="x"))  # heard: no pause, no backoff
        assert producer._backend.seen.none()  # type: ignore[attr-defined]
        worker.pause(routing_key="k")
        producer.publish("late", Event(kind="x"), routing_key="k")
        places = dict(sql(pg_url, "SELECT group_id, last_claimed_at FROM heard_transport_groups"))
        assert places["late"] == 0.0  # made where a new group goes, not with the paused ones
        lease = worker.claim("w", VIS)
        assert lease is not None and lease.group_id == "warm" and worker.ack(lease)
        assert worker.claim("w", VIS) is None  # held: the claims read the control rows
        producer._backend.seen.none_until = 0.0  # type: ignore[attr-defined]  # trust ran out
        producer.publish("later", Event(kind="x"), routing_key="k")
        assert not producer._backend.seen.none()  # type: ignore[attr-defined]
        places = dict(sql(pg_url, "SELECT group_id, last_claimed_at FROM heard_transport_groups"))
        assert places["later"] == float("-inf")
        worker.resume(routing_key="k")
        got = {worker.claim("w", VIS).group_id for _ in range(2)}  # type: ignore[union-attr]
        assert got == {"late", "later"}
    finally:
        worker.close()
        producer.close()

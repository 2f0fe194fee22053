"""harel_sa behind PgBouncer, the connection pooler most PostgreSQL deployments put in front.

In ``pool_mode = transaction`` each transaction runs on whichever server connection is free: a
``LISTEN`` stays on a server connection that then serves other clients, and so would a session
setting; and before PgBouncer 1.21 (which tracks them) a statement prepared in one transaction
may be missing in the next. A transport finds the pooler when a connection starts (its cancel
key is not the backend's), then never listens (the worker polls) and sets nothing; in
``pool_mode = session`` too, which it cannot tell apart. It keeps preparing until a statement
is lost: then that call runs again, and every statement after it, unprepared. The tests hold
for both kinds of PgBouncer (``HAREL_SA_PGBOUNCER`` runs another than the PATH's): where
PgBouncer tracks prepared statements nothing is ever lost. The same loss, on a direct
connection, by hand: ``DEALLOCATE ALL``.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import threading
from collections import defaultdict
from typing import Any

import psycopg
import pytest

from harel_sa import (
    AsyncPostgresTransport,
    Event,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    PostgresTransport,
    Worker,
)
from harel_sa.postgres.compiled import channel
from harel_sa.schema import Names
from tests.pgbouncer import Bouncer

THREADS = 4
GROUPS = 6
PER_GROUP = 25
FOUND = "a connection pooler is between"  # found at connect
LOST = "lost a prepared statement"  # found by a statement


def _listening(url: str) -> int:
    """Server connections of the database whose last statement was harel_sa's LISTEN."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query = %s",
            (f"LISTEN {channel(Names())}",),
        ).fetchone()
    return int(row[0]) if row else 0


def _lock_timeouts(url: str) -> set[str]:
    """``lock_timeout`` on each server connection of the pooler at ``url``: each connection
    in a transaction holds one, so 4 hold all of its pool."""
    holders = [psycopg.connect(url) for _ in range(4)]
    try:
        return {str((c.execute("SHOW lock_timeout").fetchone() or ("?",))[0]) for c in holders}
    finally:
        for holder in holders:
            holder.close()


def _losses(bouncer: Bouncer) -> int:
    """How many times a transport may find a statement lost behind ``bouncer``: once (then it
    prepares no more), or never where the server connection stays the client's or PgBouncer
    keeps the statements itself."""
    return int(bouncer.mode == "transaction" and not bouncer.tracks_prepared)


def _publish_as_before(q: Any) -> None:
    """The next publish sends the statement the first one did (the form that reads the control
    rows: a producer sends the plain one once it heard there is none), prepared before."""
    q._backend.seen.forget()


def _on_its_connection(q: PostgresTransport[Event], sql: str) -> Any:
    """Run ``sql`` on the connection the transport keeps for its next call: its first row."""
    session = q._sessions.take()
    assert session is not None
    try:
        cursor = session.connection.execute(sql)
        return cursor.fetchone() if cursor.description else None
    finally:
        q._sessions.keep(session)


def _publish(q: PostgresTransport[Event], group: str) -> None:
    for n in range(PER_GROUP):
        q.publish(group, Event(kind=str(n)))


def _drain(q: PostgresTransport[Event], worker: str, got: list[tuple[str, int]]) -> None:
    while (lease := q.claim(worker, 30.0)) is not None:
        got.append((lease.group_id, int(lease.event.kind)))
        assert q.ack(lease)


def _side_by_side(*threads: threading.Thread) -> None:
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _by_group(got: list[tuple[str, int]]) -> dict[str, list[int]]:
    by_group: dict[str, list[int]] = defaultdict(list)
    for group, n in got:
        by_group[group].append(n)
    return dict(by_group)


@pytest.mark.parametrize("mode", ["transaction", "session"])
def test_through_pgbouncer_each_message_is_delivered_once_in_order(
    mode: str, pg_url: str, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "harel_sa")
    bouncer: Bouncer = request.getfixturevalue(f"{mode}_pooler")
    url = bouncer.url(pg_url)
    # In session mode each client connection holds one of the pooler's 4 server connections.
    size = 10 if mode == "transaction" else 1
    with PostgresTransport(url, pool_size=size) as q:  # its schema made through the pooler
        _side_by_side(
            *(threading.Thread(target=_publish, args=(q, f"g{g}")) for g in range(GROUPS))
        )
        got: list[tuple[str, int]] = []
        _side_by_side(
            *(threading.Thread(target=_drain, args=(q, f"w{i}", got)) for i in range(THREADS))
        )
        assert q.stats().messages == 0
    assert _by_group(got) == {f"g{g}": list(range(PER_GROUP)) for g in range(GROUPS)}
    assert caplog.text.count(FOUND) == 1
    assert caplog.text.count(LOST) <= _losses(bouncer)


def test_the_async_twin_through_a_transaction_pooler(
    pg_url: str, transaction_pooler: Bouncer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "harel_sa")
    url = transaction_pooler.url(pg_url)

    async def main() -> list[tuple[str, int]]:
        q = await AsyncPostgresTransport.create(url)
        try:
            await asyncio.gather(
                *(q.publish(f"g{g}", Event(kind=str(n))) for g in range(GROUPS) for n in range(3))
            )
            got: list[tuple[str, int]] = []

            async def drain(worker: str) -> None:
                while (lease := await q.claim(worker, 30.0)) is not None:
                    got.append((lease.group_id, int(lease.event.kind)))
                    assert await q.ack(lease)

            await asyncio.gather(*(drain(f"w{i}") for i in range(THREADS)))
            assert await q.wait_for_messages(0.01) is False  # never listens
            return got
        finally:
            await q.close()

    got = asyncio.run(main())
    assert sorted(got) == sorted((f"g{g}", n) for g in range(GROUPS) for n in range(3))
    assert caplog.text.count(FOUND) == 1
    assert caplog.text.count(LOST) <= _losses(transaction_pooler)
    assert _listening(pg_url) == 0


def test_a_worker_through_a_transaction_pooler_polls_and_never_listens(
    pg_url: str, transaction_pooler: Bouncer
) -> None:
    url = transaction_pooler.url(pg_url)
    with PostgresTransport(url) as q:
        q.publish_many([(f"g{n % GROUPS}", Event(kind=str(n))) for n in range(120)])
        handled: list[int] = []
        worker = Worker(
            q,
            lambda lease: handled.append(int(lease.event.kind)),
            handle_signals=False,
            concurrency=4,
            batch=8,
            poll_interval=0.05,
        )
        assert worker.run(until_empty=True).succeeded == 120
        assert sorted(handled) == list(range(120))
        # On a direct connection the first wait connects, listens and returns True at once.
        assert q.wait_for_messages(0.05) is False
        assert q.wait_for_messages(0.05) is False
    assert _listening(pg_url) == 0


def test_a_statement_the_pooler_loses_is_run_again_unprepared(
    pg_url: str, transaction_pooler: Bouncer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "harel_sa")
    url = transaction_pooler.url(pg_url)
    with PostgresTransport(url, pool_size=1) as q:
        q.publish("g", Event(kind="1"))  # prepared on the server connection it ran on
        transaction_pooler.reconnect(pg_url)  # every server connection replaced
        _publish_as_before(q)
        q.publish("g", Event(kind="2"))
        q.publish("g", Event(kind="3"))
        kinds = []
        while (lease := q.claim("w", 30.0)) is not None:
            kinds.append(lease.event.kind)
            assert q.ack(lease)
    assert kinds == ["1", "2", "3"]
    assert caplog.text.count(LOST) == _losses(transaction_pooler)


def test_the_db_commands_through_a_transaction_pooler(
    pg_url: str, transaction_pooler: Bouncer
) -> None:
    url = transaction_pooler.url(pg_url)
    for command in (["upgrade"], ["check"], ["current"]):
        done = subprocess.run(
            [sys.executable, "-m", "harel_sa", "db", *command, "--url", url],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (command, done.stdout, done.stderr)
    assert "harel_sa_0" in done.stdout
    assert _lock_timeouts(url) == {"0"}  # the migrations' lock wait was not left behind


def test_a_direct_connection_keeps_its_statements_prepared_and_listens(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "harel_sa")
    with PostgresTransport(pg_url, pool_size=1) as q:
        q.publish("g", Event(kind="1"))
        assert _on_its_connection(q, "SELECT count(*) FROM pg_prepared_statements")[0] >= 1
        assert q.wait_for_messages(0) is True  # connects and listens
    assert FOUND not in caplog.text and LOST not in caplog.text


def test_a_pooler_missed_at_connect_is_found_by_a_lost_statement_and_the_call_run_again(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "harel_sa")
    with PostgresTransport(pg_url, pool_size=1) as q:
        q.publish("g", Event(kind="1"))
        assert q.wait_for_messages(0) is True  # listening
        _on_its_connection(q, "DEALLOCATE ALL")  # as a transaction pooler loses them
        _publish_as_before(q)
        q.publish("g", Event(kind="2"))  # its statement lost: run again, unprepared
        leases = q.claim_many("w", 30.0, 5)
        assert [lease.event.kind for lease in leases] == ["1"]
        assert q.ack(leases[0])
        lease = q.claim("w", 30.0)
        assert lease is not None and lease.event.kind == "2" and q.ack(lease)
        assert q.wait_for_messages(0.01) is False  # listens no more
    assert caplog.text.count(LOST) == 1
    assert _listening(pg_url) == 0


def test_the_async_twin_runs_a_call_again_after_a_lost_statement(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "harel_sa")

    async def main() -> None:
        q = await AsyncPostgresTransport.create(pg_url, pool_size=1)
        try:
            await q.publish("g", Event(kind="1"))
            session = q._sessions.take()
            assert session is not None
            await session.connection.execute("DEALLOCATE ALL")
            q._sessions.keep(session)
            _publish_as_before(q)
            await q.publish("g", Event(kind="2"))  # its statement lost: run again, unprepared
            assert (await q.stats()).messages == 2
            lease = await q.claim("w", 30.0)
            assert lease is not None and lease.event.kind == "1"
            assert await q.ack(lease)
        finally:
            await q.close()

    asyncio.run(main())
    assert caplog.text.count(LOST) == 1


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_through_a_transaction_pooler_the_server_sessions_keep_their_settings(
    twin: str, pg_url: str, transaction_pooler: Bouncer
) -> None:
    """A session setting harel_sa made would stay on a server connection that serves other
    clients next: through a pooler it sets nothing (its lock wait is the role's or the
    database's, as the docs say)."""
    url = transaction_pooler.url(pg_url)
    if twin == "sync":
        with PostgresTransport(url, busy_timeout=7.5) as q:
            q.publish("g", Event(kind="1"))
    else:

        async def publish() -> None:
            q = await AsyncPostgresTransport.create(url, busy_timeout=7.5)
            try:
                await q.publish("g", Event(kind="1"))
            finally:
                await q.close()

        asyncio.run(publish())
    assert _lock_timeouts(url) == {"0"}


def test_told_session_mode_a_transport_listens_and_sets_up_through_the_pooler(
    pg_url: str, session_pooler: Bouncer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "harel_sa")
    url = session_pooler.url(pg_url)
    with PostgresTransport(url, pool_size=1, busy_timeout=7.5, pooler="session") as q:
        assert q.stats().messages == 0  # a call: its connection kept for the next
        assert _on_its_connection(q, "SHOW lock_timeout")[0] == "7500ms"
        assert q.wait_for_messages(0) is True  # connects through the pooler and listens
        assert _listening(pg_url) == 1
        with PostgresTransport(pg_url) as producer:
            threading.Timer(0.2, producer.publish, ("g", Event(kind="1"))).start()
            assert q.wait_for_messages(30.0) is True  # woken by the publish's NOTIFY
    assert FOUND not in caplog.text


def test_told_session_mode_the_async_twin_listens_through_the_pooler(
    pg_url: str, session_pooler: Bouncer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "harel_sa")
    url = session_pooler.url(pg_url)

    async def main() -> tuple[bool, int]:
        q = await AsyncPostgresTransport.create(url, pool_size=1, pooler="session")
        try:
            return await q.wait_for_messages(0), _listening(pg_url)
        finally:
            await q.close()

    assert asyncio.run(main()) == (True, 1)
    assert FOUND not in caplog.text


def test_told_transaction_mode_a_transport_neither_listens_nor_sets_up_even_direct(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "harel_sa")
    with PostgresTransport(pg_url, pool_size=1, busy_timeout=7.5, pooler="transaction") as q:
        q.publish("g", Event(kind="1"))
        assert _on_its_connection(q, "SHOW lock_timeout")[0] == "0"  # the role's: none
        assert q.wait_for_messages(0.01) is False
        assert _listening(pg_url) == 0
        lease = q.claim("w", 30.0)
        assert lease is not None and q.ack(lease)
    assert FOUND not in caplog.text  # said, not found


@pytest.mark.parametrize(
    ("pooler", "error"),
    [("sessions", InvalidArgumentError), ("", InvalidArgumentError), (1, InvalidArgumentTypeError)],
)
def test_an_unknown_pooler_is_refused_before_connecting(pooler: Any, error: type) -> None:
    nowhere = "postgresql://nobody@127.0.0.1:9/nothing"  # connecting would be refused
    with pytest.raises(error, match="pooler must be"):
        PostgresTransport(nowhere, pooler=pooler)
    with pytest.raises(error, match="pooler must be"):
        asyncio.run(AsyncPostgresTransport.create(nowhere, pooler=pooler))


def test_the_async_twins_heartbeat_transport_is_told_the_same_pooler(pg_url: str) -> None:
    """The AsyncWorker's heartbeat extends leases through ``sync_twin()``: behind a pooler
    declared ``"transaction"`` it too must set nothing and never listen."""

    async def twin() -> PostgresTransport[Event]:
        q = await AsyncPostgresTransport.create(pg_url, busy_timeout=7.5, pooler="transaction")
        try:
            return q.sync_twin()
        finally:
            await q.close()

    with asyncio.run(twin()) as heartbeat:
        heartbeat.publish("g", Event(kind="1"))
        assert _on_its_connection(heartbeat, "SHOW lock_timeout")[0] == "0"
        assert heartbeat.wait_for_messages(0.01) is False


@pytest.mark.parametrize("mode", ["transaction", "session"])
def test_keyed_publishes_and_cancels_through_pgbouncer_leave_one_waiting_message(
    mode: str, pg_url: str, request: pytest.FixtureRequest
) -> None:
    """A keyed publish sends its lock and its statement in one pipeline: through either pooler
    mode, threads publishing one key leave one waiting message, replace keeps its place, and
    cancel finds it."""
    bouncer: Bouncer = request.getfixturevalue(f"{mode}_pooler")
    size = 8 if mode == "transaction" else 1
    with PostgresTransport(bouncer.url(pg_url), pool_size=size) as q:
        wrote: list[bool] = []

        def publish(n: int) -> None:
            for i in range(10):
                event = Event(kind="k", data={"n": n, "i": i})
                wrote.append(q.publish("g", event, key="one", on_key="replace"))

        _side_by_side(*(threading.Thread(target=publish, args=(n,)) for n in range(THREADS)))
        assert wrote.count(True) == 1 and q.stats().messages == 1
        assert q.publish("g", Event(kind="k"), key="one") is False  # keep: nothing written
        assert q.cancel("one") is True and q.cancel("one") is False
        assert q.stats().messages == 0

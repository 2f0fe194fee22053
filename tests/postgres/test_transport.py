"""What only the PostgreSQL transport has: a pool shared by threads, the server's clock, typed
errors for lock timeouts and lost connections, Engines as targets, the publish/ack race.
The queue's rules themselves run in tests/contract/ (the ``postgres`` kind)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import pq
from psycopg.adapt import PyFormat
from sqlalchemy import create_engine

from harel_sa import (
    AsyncPostgresTransport,
    BusyError,
    ConnectionLostError,
    Event,
    InvalidArgumentError,
    PostgresTransport,
    ReadOnlyError,
    SchemaError,
    TransportClosedError,
)
from harel_sa import migrations as mig
from harel_sa.postgres.compiled import SERVER_NOW
from harel_sa.schema import Names
from tests.checks import first_call
from tests.conftest import FakeClock

VIS = 30.0
NAMES = Names()


def ev(kind: str) -> Event:
    return Event(kind=kind)


def sql(url: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def in_threads(n: int, work: Callable[[], None], timeout: float = 120) -> list[BaseException]:
    """Run ``work`` on ``n`` threads at once, and wait for them: what they raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # a thread's error fails the test, not a warning
            raised.append(exc)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return raised


def test_leases_and_parks_use_the_servers_clock_by_default(pg_url: str) -> None:
    with PostgresTransport(pg_url) as q:
        q.publish("g", ev("m"))
        lease = q.claim("w", VIS)
        assert lease is not None
        (server_now,) = sql(pg_url, "SELECT extract(epoch from now())::float8")[0]
        (expiry,) = sql(pg_url, f"SELECT lock_expiry FROM {NAMES.messages}")[0]
        assert server_now - 5 < expiry - VIS < server_now + 5
        assert q.nack(lease, 600)
        (parked,) = sql(pg_url, f"SELECT lock_expiry FROM {NAMES.messages}")[0]
        assert server_now + 590 < parked < server_now + 610
        assert q.stats().parked == 1


def test_the_servers_now_is_the_epoch_to_the_microsecond_as_extract_gives_it(pg_url: str) -> None:
    """The statements' "now" (``SERVER_NOW``) reads the epoch without ``EXTRACT``'s numeric;
    it must give the very double ``EXTRACT(EPOCH ...)::float8`` gives, so leases written
    before and after the change compare alike: checked at 200,000 instants 7,919 s and 7 µs
    apart (50 years, every microsecond digit), and at the statement's own timestamp."""
    at_t = SERVER_NOW.replace("statement_timestamp()", "t")
    assert at_t != SERVER_NOW  # the expression reads the statement's timestamp
    (differ, checked) = sql(
        pg_url,
        f"SELECT count(*) FILTER (WHERE {at_t} IS DISTINCT FROM (EXTRACT(EPOCH FROM t))::float8),"
        " count(*) FROM (SELECT timestamptz '1990-01-01 00:00:00+00'"
        " + i * interval '7919 seconds' + i * interval '7 microseconds' AS t"
        " FROM generate_series(1, 200000) i) s",
    )[0]
    assert (differ, checked) == (0, 200_000)
    (same,) = sql(
        pg_url,
        f"SELECT {SERVER_NOW} = (EXTRACT(EPOCH FROM statement_timestamp()))::float8",
    )[0]
    assert same is True


def test_a_client_whose_clock_runs_fast_cannot_steal_a_live_lease(pg_url: str) -> None:
    """Two hosts: one's injected clock an hour ahead sees every lease as lapsed; the default
    (the server's clock) does not, so the live lease stays with its holder."""
    with PostgresTransport(pg_url) as honest:
        honest.publish("g", ev("m"))
        assert honest.claim("a", VIS) is not None
        with PostgresTransport(pg_url) as other:
            assert other.claim("b", VIS) is None
        ahead = FakeClock(time.time() + 3600)
        with PostgresTransport(pg_url, ahead) as fast:
            assert fast.claim("c", VIS) is not None  # what a client clock alone would allow


def test_an_injected_clock_moves_leases(pg_url: str, clock: FakeClock) -> None:
    with PostgresTransport(pg_url, clock) as q:
        q.publish("g", ev("m"))
        first = q.claim("w1", VIS)
        assert first is not None and q.claim("w2", VIS) is None
        clock.advance(VIS + 1)
        second = q.claim("w2", VIS)
        assert second is not None and second.seq == first.seq and second.deliveries == 2
        assert not q.ack(first) and q.ack(second)


def test_claims_from_several_threads_run_on_several_connections(pg_url: str) -> None:
    """Claims from threads are not queued behind one connection: while one thread's call
    waits on a row lock, the other threads claim and ack every other group."""
    with PostgresTransport(pg_url, pool_size=4) as q:
        q.publish_many([(f"g{i}", ev(f"m{i}")) for i in range(20)])
        stuck = q.claim("w", VIS)
        assert stuck is not None
        holder = psycopg.connect(pg_url)
        holder.execute(f"SELECT 1 FROM {NAMES.messages} WHERE seq = %s FOR UPDATE", (stuck.seq,))
        waiting = threading.Thread(target=lambda: q.ack(stuck))
        waiting.start()
        try:
            acked = 0
            while (lease := q.claim("w", VIS)) is not None:
                assert q.ack(lease)
                acked += 1
            assert acked == 19 and waiting.is_alive()
        finally:
            holder.rollback()  # at once: a closed socket frees the locks only later
            holder.close()
            waiting.join(30)
        assert q.stats().messages == 0


def test_publish_many_sends_its_arrays_in_binary_and_every_text_arrives_as_sent(
    pg_url: str,
) -> None:
    """psycopg's text form of an array quotes and escapes every element in Python (most of a
    publish_many's client work); the transport's connections send lists in binary, and texts
    an array literal would have to quote or escape arrive unchanged."""
    odd = ["", "NULL", "{a,b}", 'q"uote', "back\\slash", " spaced ", "\u00e9 \u2603", "a,b"]
    with PostgresTransport(pg_url, pool_size=1) as q:
        q.publish_many([(g, Event(kind="odd", data={"text": g})) for g in odd])
        session = q._sessions.take()
        assert session is not None
        try:
            dumper = session.connection.adapters.get_dumper(list, PyFormat.AUTO)
        finally:
            q._sessions.keep(session)
        assert dumper.format == pq.Format.BINARY
        got = []
        while (lease := q.claim("w", VIS)) is not None:
            got.append((lease.group_id, lease.event.data["text"]))
            assert q.ack(lease)
        assert sorted(got) == sorted((g, g) for g in odd)


def test_a_transport_is_shared_by_threads_without_losing_or_doubling(pg_url: str) -> None:
    with PostgresTransport(pg_url, pool_size=3) as q:
        q.publish_many([(f"g{i % 7}", ev(f"m{i}")) for i in range(140)])
        got: list[tuple[str, str]] = []
        lock = threading.Lock()

        def work() -> None:
            while (lease := q.claim("w", VIS)) is not None:
                with lock:
                    got.append((lease.group_id, lease.event.kind))
                assert q.ack(lease)

        assert in_threads(6, work) == []  # six threads on three connections: each waits its turn
        assert sorted(k for _, k in got) == sorted(f"m{i}" for i in range(140))
        for g in range(7):
            kinds = [int(k[1:]) for group, k in got if group == f"g{g}"]
            assert kinds == sorted(kinds)  # FIFO per group, whichever thread claimed


@pytest.mark.parametrize("default", ["serializable", "repeatable read"])
def test_a_database_whose_default_isolation_is_stricter_still_drains_cleanly(
    pg_url: str, default: str
) -> None:
    """A DBA's stricter default isolation does not reach the transport's transactions: six
    threads drain without one serialization failure (the claims' rules are READ COMMITTED's)."""
    _set_database_default(pg_url, "default_transaction_isolation", default)
    with psycopg.connect(pg_url) as conn:  # what any other connection now gets
        assert conn.execute("SHOW default_transaction_isolation").fetchone() == (default,)
    with PostgresTransport(pg_url, pool_size=6) as q:
        q.publish_many([(f"g{i % 20}", ev(f"m{i}")) for i in range(600)])
        acked: list[str] = []

        def work() -> None:
            while (lease := q.claim("w", VIS)) is not None:
                assert q.ack(lease)
                acked.append(lease.event.kind)

        assert in_threads(6, work) == []
        assert sorted(acked) == sorted(f"m{i}" for i in range(600))
        assert q.stats().messages == 0


def _set_database_default(url: str, setting: str, value: str) -> None:
    """``ALTER DATABASE <this one> SET setting = value``: what every new connection gets."""
    sql(
        url,
        f"DO $$ BEGIN EXECUTE format('ALTER DATABASE %%I SET {setting} = %%L', "
        f"current_database(), '{value}'); END $$",
    )


@pytest.mark.parametrize("encoding", ["LATIN1", "SQL_ASCII"])
def test_any_client_encoding_the_url_asks_for_still_carries_every_character(
    pg_url: str, encoding: str
) -> None:
    """A URL (or PGCLIENTENCODING, or the database) asking for a client encoding that cannot
    hold an event's characters, or in which psycopg reads texts as bytes: the schema is made
    and read, and every character comes back as it went."""
    url = f"{pg_url}&options=-cclient_encoding%3D{encoding}"
    with psycopg.connect(url) as conn:  # what the URL alone gives a connection
        assert conn.execute("SHOW client_encoding").fetchone() in ((encoding,), (b"SQL_ASCII",))
    group, text = "gé→😀", "é→😀 ü"
    with PostgresTransport(url) as q:
        q.publish(group, Event(kind=text, data={"x": text}))
        lease = q.claim("w", VIS)
        assert lease is not None
        assert (lease.group_id, lease.event.kind, lease.event.data) == (group, text, {"x": text})
        assert q.ack(lease)


def test_a_database_that_refuses_writes_is_a_read_only_error(pg_url: str) -> None:
    """``default_transaction_read_only`` (as on a standby): every write raises
    ReadOnlyError, as a read-only SQLite file does; reads still answer."""
    with PostgresTransport(pg_url) as q:
        q.publish("g", ev("m"))
    _set_database_default(pg_url, "default_transaction_read_only", "on")
    with PostgresTransport(pg_url, create_schema=False) as q:
        with pytest.raises(ReadOnlyError, match="refuses writes"):
            q.publish("g", ev("n"))
        with pytest.raises(ReadOnlyError):
            q.claim("w", VIS)
        assert q.stats().messages == 1
        assert [m.group_id for m in q.peek()] == ["g"]
        assert q.dead() == []


def test_text_holding_nul_is_an_invalid_argument_and_nothing_is_written(pg_url: str) -> None:
    """PostgreSQL's text cannot hold NUL (SQLite's can): an id, a key or a reason holding one
    is refused as bad input before anything is written."""
    with PostgresTransport(pg_url) as q:
        with pytest.raises(InvalidArgumentError, match="NUL"):
            q.publish("a\x00b", ev("m"))
        with pytest.raises(InvalidArgumentError, match="NUL"):
            q.publish_many([("g", ev("m")), ("h", ev("n"))], routing_key="r\x00")
        assert q.stats().messages == 0
        q.publish("g", ev("m"))
        lease = q.claim("w", VIS)
        assert lease is not None
        with pytest.raises(InvalidArgumentError, match="NUL"):
            q.dead_letter(lease, "why\x00")
        assert q.ack(lease)  # the lease was left as it was


def test_a_row_lock_held_past_busy_timeout_is_busy(pg_url: str) -> None:
    with PostgresTransport(pg_url, busy_timeout=0.3) as q:
        q.publish("g", ev("m"))
        lease = q.claim("w", VIS)
        assert lease is not None
        holder = psycopg.connect(pg_url)
        try:
            holder.execute(f"SELECT * FROM {NAMES.messages} FOR UPDATE")
            with pytest.raises(BusyError, match="lock timeout"):
                q.ack(lease)
        finally:
            holder.rollback()  # at once: a closed socket frees the locks only later
            holder.close()
        assert q.ack(lease)  # nothing was written by the busy call; the lease still holds


CLIENTS = (
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
    "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
)


def end_backends(url: str, which: str = CLIENTS) -> None:
    """Terminate the backends ``which`` selects, each waited for until it has exited (so its
    end has reached its client's socket)."""
    for (pid,) in sql(url, which):
        sql(url, "SELECT pg_terminate_backend(%s, 10000)", (pid,))


def waiting_on_a_lock(url: str) -> str:
    """Wait until a client backend waits on a lock (bounded, not timed); the query that
    selects such backends."""
    waiting = CLIENTS + " AND wait_event_type = 'Lock'"
    for _ in range(2000):
        if sql(url, waiting):
            return waiting
        time.sleep(0.005)
    raise AssertionError("no call ever waited on the lock")


def test_a_connection_the_server_ended_while_idle_is_replaced_before_the_call(
    pg_url: str,
) -> None:
    """Nothing was sent on it: the claim and the ack go through on a new connection, with no
    error for the caller (a restart or a terminated backend between two calls)."""
    with PostgresTransport(pg_url, pool_size=1) as q:
        q.publish("g", ev("m"))
        lease = q.claim("w", VIS)
        assert lease is not None
        end_backends(pg_url)
        assert q.ack(lease)
        q.publish("g", ev("n"))
        end_backends(pg_url)
        again = q.claim("w", VIS)
        assert again is not None and again.event.kind == "n"


def test_an_async_connection_ended_while_idle_is_replaced_before_the_call(pg_url: str) -> None:
    async def main() -> None:
        q = await AsyncPostgresTransport.create(pg_url, pool_size=1)
        try:
            await q.publish("g", ev("m"))
            lease = await q.claim("w", VIS)
            assert lease is not None
            end_backends(pg_url)
            assert await q.ack(lease)
        finally:
            await q.close()

    asyncio.run(main())


def test_idle_session_timeout_costs_no_call_an_error(pg_url: str) -> None:
    """A database that ends idle sessions: a worker's handler outlasts it between its claim
    and its ack, and the ack still lands (before, it raised ConnectionLostError and the
    message came back when its lease lapsed)."""
    with PostgresTransport(pg_url, pool_size=1) as q:
        q.publish("g", ev("m"))
        _set_database_default(pg_url, "idle_session_timeout", "100ms")
    with PostgresTransport(pg_url, pool_size=1) as q:
        lease = q.claim("w", VIS)
        assert lease is not None
        # Wait for that backend to be gone, not merely idle: an ack sent while its session
        # timer fires meets the timeout mid-statement, a lost connection of another kind.
        (pid,) = sql(pg_url, CLIENTS)[0]
        gone = "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
        for _ in range(1000):  # a bound, not a timing: the server ends the session soon
            if not sql(pg_url, gone, (pid,)):
                break
            time.sleep(0.01)
        else:
            raise AssertionError("the server never ended the idle session")
        assert q.ack(lease)
        assert q.stats().messages == 0


def test_a_connection_lost_mid_statement_is_a_typed_error_and_the_pool_reconnects(
    pg_url: str,
) -> None:
    """The claim's statement waits at the server (the table is locked) when its backend is
    terminated: ConnectionLostError, and the next call runs on a new connection."""
    with PostgresTransport(pg_url, pool_size=1) as q:
        q.publish("g", ev("m"))
        outcome: list[BaseException | None] = []
        with psycopg.connect(pg_url) as locker:
            locker.execute(f"LOCK TABLE {NAMES.messages} IN ACCESS EXCLUSIVE MODE")

            def claim() -> None:
                try:
                    q.claim("w", VIS)
                    outcome.append(None)
                except BaseException as exc:
                    outcome.append(exc)

            thread = threading.Thread(target=claim)
            thread.start()
            waiting = waiting_on_a_lock(pg_url)
            end_backends(pg_url, waiting)
            thread.join(60)
        assert len(outcome) == 1 and isinstance(outcome[0], ConnectionLostError)
        assert "was lost" in str(outcome[0])
        lease = q.claim("w", VIS)  # a new connection
        assert lease is not None and q.ack(lease)


def test_reads_are_retried_once_on_a_connection_lost_mid_statement(pg_url: str) -> None:
    """``stats`` only looks: its connection lost while it waits at the server, it runs again
    on a new one (and waits there until the lock goes)."""
    with PostgresTransport(pg_url, pool_size=2) as q:
        q.publish("g", ev("m"))
        got: list[object] = []
        with psycopg.connect(pg_url) as locker:
            locker.execute(f"LOCK TABLE {NAMES.messages} IN ACCESS EXCLUSIVE MODE")
            thread = threading.Thread(target=lambda: got.append(q.stats().messages))
            thread.start()
            waiting = waiting_on_a_lock(pg_url)
            (first,) = sql(pg_url, waiting)[0]
            end_backends(pg_url, waiting)
            for _ in range(2000):  # the retry waits at the lock again, on another backend
                again = sql(pg_url, waiting)
                if again and again[0][0] != first:
                    break
                time.sleep(0.005)
            else:
                raise AssertionError("the read was not retried")
            locker.rollback()
        thread.join(60)
        assert got == [1]


def test_a_server_that_is_not_there_is_a_lost_connection_at_open(pg_url: str) -> None:
    nowhere = pg_url.replace("/harel_sa_test", "/no_such_database_", 1)
    with pytest.raises(ConnectionLostError, match="cannot connect"):
        PostgresTransport(nowhere, busy_timeout=0.5)


def test_an_engine_names_the_database_and_stays_untouched(pg_url: str) -> None:
    engine = create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with PostgresTransport(engine) as q:
            q.publish("g", ev("m"))
            assert q.claim("w", VIS) is not None
        assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    finally:
        engine.dispose()


def test_a_sqlite_url_is_refused(tmp_path: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="postgresql://"):
        PostgresTransport(f"sqlite:///{tmp_path}/q.db")


def test_create_schema_false_checks_and_names_the_fix(pg_url: str) -> None:
    with pytest.raises(SchemaError, match="harel-sa db upgrade --url"):
        first_call(PostgresTransport(pg_url, create_schema=False))
    mig.upgrade(pg_url, revision="harel_sa_0004")
    with pytest.raises(SchemaError, match="this harel_sa needs harel_sa_0010"):
        first_call(PostgresTransport(pg_url, create_schema=False))
    PostgresTransport(pg_url).close()  # upgrades it, recording head where it was recorded
    assert mig.check(pg_url)
    PostgresTransport(pg_url, create_schema=False).close()


def test_start_up_and_the_revisions_build_the_same_schema(pg_server: Any) -> None:
    by_startup, by_alembic = pg_server.create_database(), pg_server.create_database()
    try:
        PostgresTransport(by_startup, prefix="jobs").close()
        mig.upgrade(by_alembic, prefix="jobs")
        catalog = (
            "SELECT table_name, column_name, data_type, is_nullable, column_default, is_identity "
            "FROM information_schema.columns WHERE table_schema = 'public' ORDER BY 1, 2"
        )
        indexes = (
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1"
        )
        for query in (catalog, indexes):
            assert sql(by_startup, query) == sql(by_alembic, query)
        assert mig.check(by_startup, prefix="jobs") and mig.check(by_alembic, prefix="jobs")
    finally:
        pg_server.drop_database(by_startup)
        pg_server.drop_database(by_alembic)


def test_transports_starting_together_do_not_race(pg_url: str) -> None:
    errors = in_threads(5, lambda: PostgresTransport(pg_url, prefix="jobs").close(), 60)
    assert errors == [] and mig.check(pg_url, prefix="jobs")
    assert sql(pg_url, f"SELECT version_num FROM {Names('jobs').version_table}") == [
        ("harel_sa_0010",)
    ]


def during_a_publish(url: str, group: str, event: Event, ack: Callable[[], object]) -> None:
    """Run ``ack`` on a thread while a publish of ``event`` into ``group`` is uncommitted, its
    upsert holding the group row as harel_sa's publish does: the ack must wait for that lock;
    then the publish commits and the ack ends."""
    publisher = psycopg.connect(url)
    try:
        publisher.execute(
            f"INSERT INTO {NAMES.groups} (group_id) VALUES (%s) "
            f"ON CONFLICT (group_id) DO UPDATE SET priority = {NAMES.groups}.priority",
            (group,),
        )
        publisher.execute(
            f"INSERT INTO {NAMES.messages} (group_id, event) VALUES (%s, %s)",
            (group, event.model_dump_json()),
        )
        acker = threading.Thread(target=ack)
        acker.start()
        acker.join(0.5)
        assert acker.is_alive()  # waiting for the publish's lock on the group row
        publisher.commit()
        acker.join(30)
    finally:
        publisher.close()


def test_a_publish_racing_the_ack_that_drains_its_group_is_not_stranded(pg_url: str) -> None:
    """The publish's upsert holds the group row while the ack waits; the ack sees a newer group
    row than its snapshot did, and leaves the group (bench/pg_baseline.py's race)."""
    with PostgresTransport(pg_url) as q:
        q.publish("race", ev("first"))
        lease = q.claim("w", VIS)
        assert lease is not None
        acked: list[bool] = []
        during_a_publish(pg_url, "race", ev("second"), lambda: acked.append(q.ack(lease)))
        assert acked == [True]
        following = q.claim("w", VIS)
        assert following is not None and following.event.kind == "second"


@pytest.mark.parametrize("fused", [False, True], ids=["ack_many", "ack_many_and_claim_many"])
def test_a_publish_racing_the_batch_of_acks_that_drains_its_group_is_not_stranded(
    pg_url: str, fused: bool
) -> None:
    """The same race against a batch of acks, whose one statement drains several groups: the
    group the publish holds stays (its row is newer than the statement's snapshot saw), the
    others are dropped."""
    with PostgresTransport(pg_url) as q:
        for group in ("after", "race", "before"):  # the race group between the others
            q.publish(group, ev(f"{group}1"))
        leases = q.claim_many("w", VIS, 3)
        assert [x.group_id for x in leases] == ["after", "race", "before"]
        done: list[Any] = []

        def ack() -> None:
            if fused:
                done.append(q.ack_many_and_claim_many(leases, "w", VIS, 3))
            else:
                done.append((q.ack_many(leases), []))

        during_a_publish(pg_url, "race", ev("race2"), ack)
        [(acked, claimed)] = done
        assert acked == [True, True, True]
        assert sql(pg_url, f"SELECT group_id FROM {NAMES.groups}") == [("race",)]
        following = claimed or q.claim_many("w", VIS, 3)
        assert [x.event.kind for x in following] == ["race2"]


def test_an_error_decoding_a_claimed_event_gives_the_lease_back(pg_url: str) -> None:
    """A claim commits its lease with its statement; an event type whose validation raises
    something other than a ValueError gets the lease back before the error reaches the caller,
    its delivery uncounted."""

    class Abort(BaseException):
        pass

    from pydantic import BaseModel, field_validator

    class Touchy(BaseModel):
        kind: str

        @field_validator("kind")
        @classmethod
        def no_boom(cls, value: str) -> str:
            if value == "boom":
                raise Abort
            return value

    with PostgresTransport(pg_url, event_type=Touchy) as q:
        q.publish("b", Touchy.model_construct(kind="boom"))
        with pytest.raises(Abort):
            q.claim("w", VIS)
        assert sql(pg_url, f"SELECT locked_by, deliveries FROM {NAMES.messages}") == [(None, 0)]
        # A batch: the leases before the one that raised and after it, all given back.
        q.publish("a", Touchy(kind="fine"))
        q.publish("d", Touchy.model_construct(kind="boom"))
        q.publish("e", Touchy(kind="fine"))  # the batch's order: a, d, e (b was claimed)
        rows = f"SELECT * FROM {NAMES.messages} ORDER BY seq"
        groups = f"SELECT * FROM {NAMES.groups} ORDER BY group_id"
        before = sql(pg_url, rows), sql(pg_url, groups)
        with pytest.raises(Abort):
            q.claim_many("w", VIS, 3)
        assert (sql(pg_url, rows), sql(pg_url, groups)) == before


def test_calls_after_close_raise(pg_url: str) -> None:
    q = PostgresTransport(pg_url)
    q.close()
    q.close()
    with pytest.raises(TransportClosedError):
        q.claim("w", VIS)

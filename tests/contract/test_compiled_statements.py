"""Every statement a transport sends is SQLAlchemy's compilation of a Core ``text()``
construct, as the design card says, on its own hot path too: the statements the driver ran in
a workload of every call (SQLite's trace of them; on PostgreSQL the session's prepared
statements) are, one for one, compilations of the statements modules' ``text()`` constructs,
for that dialect, and each holds its construct."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sqlalchemy import TextClause

from harel_sa import Event, PostgresTransport, SqliteTransport
from harel_sa.postgres import compiled as pgc
from harel_sa.postgres import driver as pg_driver
from harel_sa.postgres import kinds as pg_kinds
from harel_sa.postgres import statements as pg
from harel_sa.schema import Names
from harel_sa.sqlite import statements as lite


def workload(q: Any) -> None:
    """Every call of the queue, hot path and admin, at least once."""
    q.publish("a", Event(kind="one"), priority=1, routing_key="k")
    q.publish("a", Event(kind="two"), priority=1, routing_key="k")
    q.publish_many([(g, Event(kind=g)) for g in "bcde"])
    lease = q.claim("w", 30.0)
    assert lease is not None and q.extend(lease, 60.0)
    _, following = q.ack_and_claim(lease, "w", 30.0, min_priority=0, routing_keys=["k", "x"])
    assert following is not None and q.nack(following, 0.0)
    leases = q.claim_many("w", 30.0, 4)
    assert len(leases) == 4
    assert q.ack_many(leases[:1]) == [True]
    assert q.nack(leases[1], 5.0) and q.dead_letter(leases[2], "no") and q.ack(leases[3])
    q.publish_many([("f", Event(kind="f")), ("g", Event(kind="g"))])
    q.ack_many_and_claim_many(q.claim_many("w", 30.0, 2), "w", 30.0, 2)
    q.stats(), q.peek(), q.dead(), q.release(), q.requeue_dead(), q.purge("d"), q.purge_dead()
    q.pause(routing_key="k"), q.pause(group_id="a"), q.backoff(None, 5.0), q.paused(), q.limits()
    q.resume(routing_key="k"), q.resume(group_id="a")


def constructs(statements: object, sized: tuple[str, ...], size: int) -> list[Any]:
    """The compiled statements of a statements object: its attributes, and each built per
    size or per claim shape that the workload used."""
    found = [v for v in vars(statements).values() if hasattr(v, "clause")]
    for name in sized:
        for n in range(1, size + 1):
            found.append(getattr(statements, name)(n))
    return found


def test_sqlite_runs_only_compiled_text_constructs(tmp_path: Path) -> None:
    ran: list[str] = []
    with SqliteTransport(tmp_path / "q.db") as q:
        raw = q._db.raw  # type: ignore[union-attr]
        raw.set_trace_callback(ran.append)
        workload(q)
        raw.set_trace_callback(None)
    st = lite.statements_for(Names())
    compiled = constructs(
        st, ("mark_claimed", "lease", "locks_of", "delete_seqs", "drop_groups_if_empty"), 4
    )
    compiled += [st.claim(0, 0), st.claim(0, 2), st.claim_up_to(0, 0), st.claim_up_to(0, 2)]
    compiled += constructs(st.scheduling, (), 0) + constructs(st.flow, (), 0)
    for statement in compiled:
        assert isinstance(statement.clause, TextClause)
    # The trace shows each statement with its values in place: one pattern per compilation.
    patterns = [
        re.compile(re.sub(r"\\\?\d+|:\w+", lambda m: "(.*?)", re.escape(str(s))), re.S)
        for s in compiled
    ]
    queue_statements = [
        sql for sql in ran if not re.match(r"(BEGIN|COMMIT|ROLLBACK|PRAGMA|SAVEPOINT|RELEASE)", sql)
    ]
    assert len(queue_statements) > 30
    strays = [sql for sql in queue_statements if not any(p.fullmatch(sql) for p in patterns)]
    assert not strays, strays


def test_postgresql_prepares_only_compiled_text_constructs(pg_url: str) -> None:
    with PostgresTransport(pg_url, pool_size=1) as q:
        workload(q)
        session = q._sessions.take()  # the one connection every call ran on
        assert session is not None
        rows = session.connection.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in rows.fetchall()]
        session.connection.rollback()
        q._sessions.keep(session)
    st = pg.statements_for(Names(), True)
    every = [*vars(st).values(), *vars(st.scheduling).values(), *vars(st.flow).values()]
    # And the driver's own: the claims' planner settings and the transactions' begins.
    every += [pg_driver.STEER, pg_kinds.BEGIN_WRITE, pg_kinds.BEGIN_SNAPSHOT]
    compiled = {s.sql.decode() for s in every if isinstance(s, pgc.Statement)}
    for statement in vars(st).values():
        if isinstance(statement, pgc.Statement):
            assert statement.sql == str(statement.clause.compile(dialect=pgc._DOLLAR)).encode()
    assert len(prepared) > 10
    strays = [sql for sql in prepared if sql not in compiled and not _built_on_demand(st, sql)]
    assert not strays, strays


def _built_on_demand(st: Any, sql: str) -> bool:
    """``sql`` is one of the statements built per claim shape or batch size, compiled from
    its construct."""
    built = [st.claim(0, 0), st.claim(0, 2)]
    built += [st.acks(size) for size in pg.BATCH_SIZES]
    built += [st.claim_many(0, keys, size) for keys in (0, 2) for size in pg.BATCH_SIZES]
    return any(
        s.sql.decode() == sql and s.sql == str(s.clause.compile(dialect=pgc._DOLLAR)).encode()
        for s in built
    )

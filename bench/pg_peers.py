"""The queues measured on PostgreSQL, each behind the little each workload needs of it.

Two kinds:

- **Group queues** (harel_sa's semantics: FIFO groups, one in flight per group, leases):
  driven by the bench's own claim + ack loop through :class:`GroupQueue`. Each entry of
  :data:`GROUP_QUEUES` says how to make its schema and how a worker process opens it
  (``open(url, process_index)``). The plain-psycopg baseline and harel 0.9.0's own
  ``PostgresTransport`` are here, beside harel_sa's own ``PostgresTransport`` (a pool of one
  connection per worker process). An entry with ``batch`` > 1 is drained in batches
  (``claim_many`` then ``ack_many_and_claim_many``, :data:`DRAIN_BATCH` at a time): harel_sa's
  and the baseline's, against pgqueuer's batched dequeue (issue 16).
  :data:`PUBLISH_ONLY` holds queues only published to (their fills timed, never drained): the
  baseline publishing with harel_sa's ``NOTIFY``.

- **Job queues** (pgqueuer, procrastinate: no groups, no per-group FIFO; throughput
  references): each drains with its own worker loop, the way its documentation runs one,
  with a zero-work handler (:class:`JobQueueKind`).

Every worker records which message it handled (``i`` in the payload), so the harness checks
that every message was delivered exactly once, and (for group queues) in order per group.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import pg_baseline
import pg_same_sql
import psycopg

VISIBILITY = 300.0  # seconds: no lease lapses during a drain
#: The prefix of the variables that say where a pooler run's PgBouncers listen.
POOLER_VARIABLE = "HAREL_SA_BENCH_PGBOUNCER"
DRAIN_BATCH = 32  # leases per claim_many / ack_many_and_claim_many in a batched drain


class GroupQueue(Protocol):
    """A queue with harel_sa's group semantics, as one worker process holds it."""

    def publish(self, group_id: str, event: Any) -> None: ...

    def publish_many(self, items: list[tuple[str, Any]]) -> None: ...

    def claim(self, worker_id: str) -> Any:
        """A lease (``.group_id``, ``.event.data["i"]``) on a group's head, or None."""

    def ack(self, lease: Any) -> object:
        """Settle the lease; False means it was fenced off (a stale lease)."""

    def claim_many(self, worker_id: str, limit: int) -> list[Any]:
        """Up to ``limit`` leases on distinct groups, in one transaction."""

    def ack_many_and_claim_many(
        self, leases: list[Any], worker_id: str, limit: int
    ) -> tuple[list[bool], list[Any]]:
        """Settle ``leases`` and take up to ``limit`` new ones, in one transaction: for each
        lease whether its ack took (False: fenced off), and the new leases."""

    def empty(self) -> bool:
        """No message left (a None claim can also mean every group is in flight)."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class GroupQueueKind:
    name: str
    label: str
    dists: tuple[str, ...]  # distributions whose versions the report names
    create_schema: Callable[[str], None]
    open: Callable[[str, int], GroupQueue]
    event: Callable[[int], Any]  # the event type this queue publishes
    tables: tuple[str, str]  # (messages, groups): both empty after a drain
    batched_publish: bool  # has a publish_many of its own
    batch: int = 1  # > 1: drained by claim_many + ack_many_and_claim_many of this many


def harel_sa_event(i: int) -> Any:
    from harel_sa import Event

    return Event(kind="bench.tick", data={"i": i, "note": "benchmark payload"})


def harel_event(i: int) -> Any:
    from harel.spec.states import Event

    return Event(kind="bench.tick", data={"i": i, "note": "benchmark payload"})


class Baseline:
    """A plain-psycopg queue (:class:`pg_baseline.Baseline`, :class:`pg_same_sql.SameSql`:
    the same calls) as a :class:`GroupQueue`."""

    def __init__(self, q: pg_baseline.Baseline | pg_same_sql.SameSql) -> None:
        self.q = q

    def publish(self, group_id: str, event: Any) -> None:
        self.q.publish(group_id, event)

    def publish_many(self, items: list[tuple[str, Any]]) -> None:
        self.q.publish_many(items)

    def claim(self, worker_id: str) -> Any:
        return self.q.claim(worker_id, VISIBILITY)

    def ack(self, lease: Any) -> object:
        return self.q.ack(lease)

    def claim_many(self, worker_id: str, limit: int) -> list[Any]:
        return self.q.claim_many(worker_id, VISIBILITY, limit)

    def ack_many_and_claim_many(
        self, leases: list[Any], worker_id: str, limit: int
    ) -> tuple[list[bool], list[Any]]:
        return self.q.ack_many_and_claim_many(leases, worker_id, VISIBILITY, limit)

    def empty(self) -> bool:
        return self.q.empty()

    def close(self) -> None:
        self.q.close()


class Transport:
    """A transport with harel's API (``publish``, ``claim(worker, visibility)``, ``ack``,
    ``close``; ``publish_many`` if it has one) as a :class:`GroupQueue`. ``empty`` asks a
    connection of its own, only when a claim came back empty."""

    def __init__(self, transport: Any, url: str, messages_table: str) -> None:
        self.t = transport
        self._url, self._empty_sql = url, f"SELECT NOT EXISTS (SELECT 1 FROM {messages_table})"
        self._probe: psycopg.Connection[Any] | None = None

    def publish(self, group_id: str, event: Any) -> None:
        self.t.publish(group_id, event)

    def publish_many(self, items: list[tuple[str, Any]]) -> None:
        if hasattr(self.t, "publish_many"):
            self.t.publish_many(items)
        else:
            for group_id, event in items:
                self.t.publish(group_id, event)

    def claim(self, worker_id: str) -> Any:
        return self.t.claim(worker_id, VISIBILITY)

    def ack(self, lease: Any) -> object:
        return self.t.ack(lease)

    def claim_many(self, worker_id: str, limit: int) -> list[Any]:
        leases: list[Any] = self.t.claim_many(worker_id, VISIBILITY, limit)
        return leases

    def ack_many_and_claim_many(
        self, leases: list[Any], worker_id: str, limit: int
    ) -> tuple[list[bool], list[Any]]:
        acked, claimed = self.t.ack_many_and_claim_many(leases, worker_id, VISIBILITY, limit)
        return acked, claimed

    def empty(self) -> bool:
        if self._probe is None:
            self._probe = psycopg.connect(self._url, autocommit=True)
        row = self._probe.execute(self._empty_sql).fetchone()
        return bool(row and row[0])

    def close(self) -> None:
        self.t.close()
        if self._probe is not None:
            self._probe.close()


def _harel_transport(url: str, create_schema: bool) -> Any:
    from harel.engine.transport.postgres import PostgresTransport

    # One connection per worker process, in harel's own (non-autocommit) mode.
    return PostgresTransport(psycopg.connect(url), create_schema=create_schema)


def _harel_sa_transport(url: str, create_schema: bool) -> Any:
    from harel_sa import PostgresTransport

    # One worker process, one claim at a time: a pool of one connection.
    return PostgresTransport(url, create_schema=create_schema, pool_size=1)


def _harel_sa_kind(name: str, label: str, batch: int = 1) -> GroupQueueKind:
    return GroupQueueKind(
        name,
        label,
        ("harel-sa", "psycopg"),
        create_schema=lambda url: _harel_sa_transport(url, True).close(),
        open=lambda url, i: Transport(
            _harel_sa_transport(url, False), url, "harel_transport_messages"
        ),
        event=harel_sa_event,
        tables=("harel_transport_messages", "harel_transport_groups"),
        batched_publish=True,
        batch=batch,
    )


def _baseline_kind(
    name: str, label: str, batch: int = 1, *, notify: bool = False
) -> GroupQueueKind:
    return GroupQueueKind(
        name,
        label,
        ("psycopg",),
        create_schema=pg_baseline.create_schema,
        open=lambda url, i: Baseline(pg_baseline.Baseline(url, i, notify=notify)),
        event=harel_sa_event,
        tables=(pg_baseline.MESSAGES, pg_baseline.GROUPS),
        batched_publish=True,
        batch=batch,
    )


def _same_sql_kind(name: str, label: str, batch: int = 1) -> GroupQueueKind:
    return GroupQueueKind(
        name,
        label,
        ("psycopg",),
        create_schema=lambda url: _harel_sa_transport(url, True).close(),
        open=lambda url, i: Baseline(pg_same_sql.SameSql(url, i)),
        event=harel_sa_event,
        tables=pg_same_sql.TABLES,
        batched_publish=True,
        batch=batch,
    )


BATCHED = f"batches of {DRAIN_BATCH}"

GROUP_QUEUES: dict[str, GroupQueueKind] = {
    "harel_sa": _harel_sa_kind("harel_sa", "harel_sa PostgresTransport"),
    "baseline": _baseline_kind("baseline", "baseline (plain psycopg)"),
    "harel": GroupQueueKind(
        "harel",
        "harel 0.9.0 PostgresTransport",
        ("harel", "psycopg"),
        create_schema=lambda url: _harel_transport(url, True).close(),
        open=lambda url, i: Transport(
            _harel_transport(url, False), url, "harel_transport_messages"
        ),
        event=harel_event,
        tables=("harel_transport_messages", "harel_transport_groups"),
        batched_publish=False,
    ),
    "same SQL": _same_sql_kind("same SQL", "baseline (plain psycopg, harel_sa's SQL)"),
    "harel_sa batched": _harel_sa_kind(
        "harel_sa batched", f"harel_sa PostgresTransport, {BATCHED}", DRAIN_BATCH
    ),
    "baseline batched": _baseline_kind(
        "baseline batched", f"baseline (plain psycopg), {BATCHED}", DRAIN_BATCH
    ),
    "same SQL batched": _same_sql_kind(
        "same SQL batched", f"baseline (plain psycopg, harel_sa's SQL), {BATCHED}", DRAIN_BATCH
    ),
}


#: A queue drained through a PgBouncer: ``<group queue> via PgBouncer <version>``.
VIA = " via PgBouncer "


def pooler_variable(version: str) -> str:
    """Where the PgBouncer of ``version`` listens (``host=...&port=...``), for the worker
    processes a pooler run spawns."""
    return f"{POOLER_VARIABLE}_{version.replace('.', '_')}"


def through_pooler(url: str, version: str) -> str:
    """``url``'s database through the PgBouncer of ``version`` (:func:`pooler_variable`)."""
    parts = urlsplit(url)
    query = os.environ[pooler_variable(version)]
    return urlunsplit(("postgresql", "postgres@", parts.path, query, ""))


def _pooled_kind(name: str) -> GroupQueueKind:
    """``<harel_sa queue> via PgBouncer <version>``: the queue's transport through that
    PgBouncer (its schema made, its fills published and ``empty`` asked directly)."""
    base, version = name.split(VIA)
    direct = GROUP_QUEUES[base]
    return GroupQueueKind(
        name,
        f"{direct.label} through PgBouncer {version}",
        direct.dists,
        create_schema=direct.create_schema,
        open=lambda url, i: Transport(
            _harel_sa_transport(through_pooler(url, version), False), url, direct.tables[0]
        ),
        event=direct.event,
        tables=direct.tables,
        batched_publish=direct.batched_publish,
        batch=direct.batch,
    )


def group_queue(name: str) -> GroupQueueKind:
    """The group queue ``name``: of :data:`GROUP_QUEUES`, or one of them through a PgBouncer
    (:data:`VIA`)."""
    return GROUP_QUEUES[name] if VIA not in name else _pooled_kind(name)


#: Queues whose fills are timed beside the drains' but never drained: the baseline doing the
#: publish's whole work as harel_sa does it (its NOTIFY), so the publish target compares like
#: with like, while the baseline above (without it) shows what the NOTIFY costs.
PUBLISH_ONLY: dict[str, GroupQueueKind] = {
    "baseline notify": _baseline_kind(
        "baseline notify", "baseline (plain psycopg, with NOTIFY)", notify=True
    ),
}

# --- job queues ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Drained:
    """What one worker process did: when it started and stopped, which messages it handled."""

    start: float
    end: float
    handled: list[int]


@dataclass(frozen=True)
class JobQueueKind:
    name: str
    label: str
    dists: tuple[str, ...]
    create_schema: Callable[[str], None]
    enqueue: Callable[[str, int, int], float]  # (url, n, batch) -> seconds it took
    drain: Callable[[str, int, Any], Drained]  # (url, process_index, barrier)
    remaining: Callable[[str], int]  # jobs left in the queue after the drain
    how: str  # how a drain is done: the calls and settings used


def _run_uvloop(coro: Any) -> Any:
    """As pgqueuer's own CLI (``pgq run``) runs its manager: on uvloop when installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


async def _pgqueuer_queries(url: str) -> tuple[Any, Any]:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    conn = await asyncpg.connect(url)
    return conn, Queries(AsyncpgDriver(conn))


def _pgqueuer_schema(url: str) -> None:
    async def go() -> None:
        conn, queries = await _pgqueuer_queries(url)
        await queries.install()
        await conn.close()

    asyncio.run(go())


def _pgqueuer_enqueue(url: str, n: int, batch: int) -> float:
    async def go() -> float:
        conn, queries = await _pgqueuer_queries(url)
        t0 = time.perf_counter()
        for lo in range(0, n, batch):
            idx = range(lo, min(n, lo + batch))
            await queries.enqueue(
                ["tick"] * len(idx), [str(i).encode() for i in idx], [0] * len(idx)
            )
        elapsed = time.perf_counter() - t0
        await conn.close()
        return elapsed

    return float(asyncio.run(go()))


def _pgqueuer_drain(url: str, process_index: int, barrier: Any) -> Drained:
    import asyncpg
    from pgqueuer import AsyncpgDriver, PgQueuer
    from pgqueuer.models import Job
    from pgqueuer.types import QueueExecutionMode

    handled: list[int] = []

    async def go() -> Drained:
        conn = await asyncpg.connect(url)  # its docs: one direct connection per manager
        pgq = PgQueuer(AsyncpgDriver(conn))

        @pgq.entrypoint("tick")
        async def tick(job: Job) -> None:
            handled.append(int(job.payload or b"-1"))

        barrier.wait()
        start = time.monotonic()
        await pgq.run(mode=QueueExecutionMode.drain)  # batch_size=10, as `pgq run`
        end = time.monotonic()
        await conn.close()
        return Drained(start, end, handled)

    result: Drained = _run_uvloop(go())
    return result


def _pgqueuer_remaining(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT count(*) FROM pgqueuer").fetchone()
    return int(row[0]) if row else -1


def _procrastinate_app(url: str, handled: list[int] | None = None) -> tuple[Any, Any]:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="tick", queue="bench")
    async def tick(i: int) -> None:
        if handled is not None:
            handled.append(i)

    return app, tick


def _procrastinate_schema(url: str) -> None:
    app, _ = _procrastinate_app(url)
    with app.open():
        app.schema_manager.apply_schema()


def _procrastinate_enqueue(url: str, n: int, batch: int) -> float:
    app, tick = _procrastinate_app(url)

    async def go() -> float:
        async with app.open_async():
            t0 = time.perf_counter()
            for lo in range(0, n, batch):
                await tick.batch_defer_async(*({"i": i} for i in range(lo, min(n, lo + batch))))
            return time.perf_counter() - t0

    return float(asyncio.run(go()))


def _procrastinate_drain(url: str, process_index: int, barrier: Any) -> Drained:
    handled: list[int] = []
    app, _ = _procrastinate_app(url, handled)

    async def go() -> Drained:
        async with app.open_async():
            barrier.wait()
            start = time.monotonic()
            # wait=False: the worker stops once it has caught up with the queue (a drain).
            await app.run_worker_async(queues=["bench"], wait=False, name=f"p{process_index}")
            end = time.monotonic()
        return Drained(start, end, handled)

    return asyncio.run(go())


def _procrastinate_remaining(url: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
        ).fetchone()
    return int(row[0]) if row else -1


JOB_QUEUES: dict[str, JobQueueKind] = {
    "pgqueuer": JobQueueKind(
        "pgqueuer",
        "pgqueuer",
        ("pgqueuer", "asyncpg"),
        create_schema=_pgqueuer_schema,
        enqueue=_pgqueuer_enqueue,
        drain=_pgqueuer_drain,
        remaining=_pgqueuer_remaining,
        how="`PgQueuer(AsyncpgDriver(conn))` on one direct asyncpg connection per worker"
        " process (its docs: no pool for the manager), one async entrypoint,"
        " `run(mode=QueueExecutionMode.drain)` with its defaults (dequeue batches of 10,"
        " completions logged in batches), on uvloop as `pgq run` does. (Its psycopg driver"
        " drained 20% slower here, and its drain mode then idled ~4 s before returning)",
    ),
    "procrastinate": JobQueueKind(
        "procrastinate",
        "procrastinate",
        ("procrastinate", "psycopg"),
        create_schema=_procrastinate_schema,
        enqueue=_procrastinate_enqueue,
        drain=_procrastinate_drain,
        remaining=_procrastinate_remaining,
        how="`App(connector=PsycopgConnector(conninfo=url))`, one async task,"
        " `run_worker_async(queues=[...], wait=False)` with its defaults (concurrency 1,"
        " LISTEN/NOTIFY on): each job fetched by one statement and finished by another",
    ),
}

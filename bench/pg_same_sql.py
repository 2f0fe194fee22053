"""The same-SQL baseline: harel_sa's own statements on harel_sa's own schema, in plain psycopg.

Issue 15 asks for "a plain-psycopg implementation of the same claim SQL" as the baseline of
the PostgreSQL backend: what is left between it and ``PostgresTransport`` is the library's own
cost (validation, the pool and its sessions, the operations' programs, ``Lease`` objects,
errors), not the SQL's. The statements come from ``harel_sa.postgres.statements`` (the
server's clock, the default prefix), so they are harel_sa's to the byte: the claim's look-ahead
past the head, the groups' per-floor and routing-key indexes its updates maintain, the
publish's ``enqueued_at`` and ``NOTIFY``. The schema is made by harel_sa's migrations.

Like :class:`pg_baseline.Baseline`: one connection in autocommit, one prepared statement per
call (``RawCursor``), lists (arrays) dumped in binary as harel_sa's connections dump them, the
event encoded with ``model_dump_json`` and decoded with pydantic's validator. A batch is
``BEGIN``, the acks, the claim, ``COMMIT``, each statement built for the batch's size as
harel_sa's are. Nothing else: no argument checks, no pool, no retry, no dead-lettering (a head
that does not decode raises; the benchmarks publish none). Not thread-safe.

:class:`pg_baseline.Baseline` stays the independent reference: the design's SQL written there,
without the look-ahead and with two indexes on the groups; ``bench/RESULTS.md`` shows both.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.array import ListBinaryDumper

from harel_sa import Event
from harel_sa.postgres.compiled import Statement
from harel_sa.postgres.statements import batch_size, statements_for
from harel_sa.schema import DEFAULT_PREFIX, Names

NAMES = Names(DEFAULT_PREFIX)
TABLES = (NAMES.messages, NAMES.groups)


@dataclass(frozen=True, slots=True)
class Lease:
    seq: int
    group_id: str
    event: Event
    locked_by: str


class SameSql:
    """One worker process's connection, sending harel_sa's statements as they are."""

    def __init__(self, url: str, process_index: int = 0) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.adapters.register_dumper(list, ListBinaryDumper)
        self.cur = psycopg.RawCursor(self.conn)
        self.st = statements_for(NAMES, True)
        self._claim = self.st.claim(0, 0)
        self._tokens = itertools.count()
        self._tag = f"{process_index}"
        self._decode = Event.__pydantic_validator__.validate_json

    def _execute(self, statement: Statement, params: dict[str, Any]) -> None:
        self.cur.execute(statement.sql, statement.bind(params), prepare=True)

    def _rows(self, statement: Statement, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        self._execute(statement, params)
        return self.cur.fetchall()

    def publish(self, group_id: str, event: Event) -> None:
        params = {
            "group_id": group_id,
            "event": event.model_dump_json(),
            "priority": 0,
            "routing_key": None,
        }
        self._execute(self.st.publish, params)

    def publish_many(self, items: list[tuple[str, Event]]) -> None:
        params = {
            "groups": [g for g, _ in items],
            "events": [e.model_dump_json() for _, e in items],
            "priority": 0,
            "routing_key": None,
        }
        self._execute(self.st.publish_many, params)

    def _token(self, worker_id: str) -> str:
        return f"{worker_id}#{self._tag}:{next(self._tokens)}"

    def claim(self, worker_id: str, visibility: float) -> Lease | None:
        locked_by = self._token(worker_id)
        rows = self._rows(self._claim, {"locked_by": locked_by, "visibility": visibility})
        if not rows:
            return None
        seq, group_id, raw = rows[0][:3]
        return Lease(seq, group_id, self._decode(raw), locked_by)

    def ack(self, lease: Lease) -> bool:
        params = {"group_id": lease.group_id, "seq": lease.seq, "locked_by": lease.locked_by}
        return bool(self._rows(self.st.ack, params)[0][0] == 1)

    def claim_many(self, worker_id: str, visibility: float, limit: int) -> list[Lease]:
        """Up to ``limit`` leases (at most 64) on distinct groups: one statement, in
        autocommit."""
        size = batch_size(limit)
        tokens = [self._token(worker_id) for _ in range(limit)]
        params = {"limit": limit, "tokens": tokens, "visibility": visibility}
        rows = self._rows(self.st.claim_many(0, 0, size), params)
        return [
            Lease(seq, group_id, self._decode(raw), tokens[k])
            for k, (seq, group_id, raw, *_) in enumerate(rows)
        ]

    def ack_many_and_claim_many(
        self, leases: list[Lease], worker_id: str, visibility: float, limit: int
    ) -> tuple[list[bool], list[Lease]]:
        """The acks of ``leases`` (at most 64; one statement), then :meth:`claim_many`, in
        one transaction."""
        if not leases:
            return [], self.claim_many(worker_id, visibility, limit)
        size = batch_size(len(leases))
        keys: list[Any] = []
        for lease in leases:
            keys += (lease.seq, lease.locked_by)
        keys += keys[-2:] * (size - len(leases))  # the last pair again: deleted once
        self.cur.execute("BEGIN")
        try:
            deleted = set(self._rows(self.st.acks(size), {"keys": keys}))
            claimed = self.claim_many(worker_id, visibility, limit)
        except BaseException:
            if not self.conn.closed and not self.conn.broken:
                self.cur.execute("ROLLBACK")
            raise
        self.cur.execute("COMMIT")
        return [(lease.seq, lease.locked_by) in deleted for lease in leases], claimed

    def empty(self) -> bool:
        self.cur.execute(f"SELECT NOT EXISTS (SELECT 1 FROM {NAMES.messages})".encode())
        row = self.cur.fetchone()
        return bool(row and row[0])

    def close(self) -> None:
        self.conn.close()

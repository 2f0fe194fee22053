"""The claim's plan on PostgreSQL (EXPLAIN): the walk of the groups is an index walk in
round-robin order that stops at the first eligible group, never a sort of the backlog, under
the generic plan a prepared statement settles on."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from harel_sa import Event, PostgresTransport
from harel_sa.postgres.statements import statements_for
from harel_sa.schema import Names

NAMES = Names()


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += nodes(child)
    return found


def test_the_claim_walks_the_round_robin_index_without_sorting(pg_url: str) -> None:
    with PostgresTransport(pg_url) as q:
        q.publish_many([(f"g{i}", Event(kind="m")) for i in range(5000)])
    claim = statements_for(NAMES, True).claim(0, False)
    params = {"locked_by": "w#1", "visibility": 30.0, "min_priority": 0, "keys": []}
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ANALYZE")
        conn.execute("SET plan_cache_mode = force_generic_plan")
        row = conn.execute(f"EXPLAIN (FORMAT JSON) {claim}", params).fetchone()
    assert row is not None
    plan = row[0][0]["Plan"] if isinstance(row[0], list) else json.loads(row[0])[0]["Plan"]
    every = nodes(plan)
    walks = [n for n in every if n.get("Index Name") == NAMES.groups_by_last_claimed]
    assert walks, json.dumps(plan, indent=1)[:3000]
    assert not any("Sort" in n["Node Type"] for n in every), json.dumps(plan, indent=1)[:3000]
    assert not any(
        n["Node Type"] == "Seq Scan" and n.get("Relation Name") == NAMES.groups for n in every
    )

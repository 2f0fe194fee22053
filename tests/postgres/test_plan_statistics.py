"""The claim's plan with the statistics of a queue analyzed while it was near-empty and all
leased, as autovacuum finds a queue that keeps up. With them the planner once priced the walk
of the groups as a scan of them all, chose a sort of every group (or the messages as the outer
side of the join: a claim quadratic in the backlog) and kept that plan while a backlog grew:
under load, a queue that stopped. harel_sa's sessions steer the planner
(:data:`harel_sa.postgres.connect.PLANNER`): every claim stays a walk of its index that reads
the groups it leases and no other, however wrong the statistics. Row counts, not times.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest

from harel_sa import Event, PostgresTransport
from harel_sa.postgres.connect import set_up
from harel_sa.postgres.statements import statements_for
from tests.postgres.test_claim_plan import (
    LIMIT,
    NAMES,
    SIZE,
    batch_params,
    fed,
    generic_plan,
    nodes,
    on_groups,
)

BACKLOG = 1000


@pytest.fixture(scope="module")
def misjudged(pg_server: Any) -> Any:
    """Statistics taken of 30 groups whose heads were all leased; then a backlog of
    ``BACKLOG`` groups (half with the routing key ``east`` and priority 2) that autovacuum
    is kept from analyzing."""
    url = pg_server.create_database()
    with PostgresTransport(url) as q, psycopg.connect(url, autocommit=True) as conn:
        for table in (NAMES.groups, NAMES.messages):
            conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
        q.publish_many([(f"a{i}", Event(kind="m")) for i in range(30)])
        held = q.claim_many("w", 30.0, 30)
        conn.execute(f"ANALYZE {NAMES.groups}")
        conn.execute(f"ANALYZE {NAMES.messages}")
        q.ack_many(held)
        # The group ids past the statistics' histogram (as every new group's is), half of
        # them with a routing key and a priority for the claims with a key or a floor.
        half = BACKLOG // 2
        q.publish_many([(f"j{i}", Event(kind="m")) for i in range(half)])
        q.publish_many([(f"k{i}", Event(kind="m")) for i in range(half)],
                       priority=2, routing_key="east")  # fmt: skip
    yield url
    pg_server.drop_database(url)


def steered(url: str) -> psycopg.Connection[Any]:
    """A connection set up as harel_sa sets up its own (:func:`set_up`)."""
    conn = psycopg.connect(url, autocommit=True)
    set_up(conn)
    return conn


CLAIMS = pytest.mark.parametrize(
    ("min_priority", "keys"),
    [(0, []), (2, []), (0, ["east"]), (0, ["west", "east"])],
    ids=["plain", "floor", "one-key", "two-keys"],
)


@CLAIMS
def test_a_claim_walks_its_index_however_wrong_the_statistics(
    misjudged: str, min_priority: int, keys: list[str]
) -> None:
    claim = statements_for(NAMES, True).claim(min_priority, len(keys))
    params = {"locked_by": "w#1", "visibility": 30.0, "min_priority": min_priority, "keys": keys}
    with steered(misjudged) as conn:
        plan = generic_plan(conn, claim, params)
    shown = json.dumps(plan, indent=1)[:4000]
    every = nodes(plan)
    walks = [n for n in every if on_groups(n) and n.get("Index Name") != f"{NAMES.groups}_pkey"]
    assert walks, shown
    # A walk per lane that stops at the first group it may lease: not the backlog.
    assert sum(n["Actual Rows"] for n in walks) <= max(1, len(keys)), shown
    assert not any("Sort" in n["Node Type"] and any(on_groups(s) for s in fed(n)) for n in every)
    scanned = [n for n in every if "Scan" in n["Node Type"] and "Relation Name" in n]
    assert max(n["Actual Rows"] * n["Actual Loops"] for n in scanned) <= 2 * len(walks), shown
    assert plan["Actual Rows"] == 1, shown


@CLAIMS
def test_a_batch_claim_walks_its_index_however_wrong_the_statistics(
    misjudged: str, min_priority: int, keys: list[str]
) -> None:
    claim = statements_for(NAMES, True).claim_many(min_priority, len(keys), SIZE)
    with steered(misjudged) as conn:
        answer = generic_plan(conn, claim, batch_params(min_priority, keys), whole=True)
    # Not compiled: the planner's penalties on what it may not use would price it past
    # jit_above_cost, and compiling costs a claim hundreds of milliseconds.
    assert "JIT" not in answer, answer.get("JIT")
    plan = answer["Plan"]
    shown = json.dumps(plan, indent=1)[:6000]
    every = nodes(plan)
    walks = [n for n in every if on_groups(n) and n.get("Index Name") != f"{NAMES.groups}_pkey"]
    assert walks and all(n["Actual Rows"] <= SIZE for n in walks), shown
    for sort in (n for n in every if "Sort" in n["Node Type"]):
        assert not any(on_groups(n) for n in fed(sort)), shown
    assert not any(n["Node Type"] == "Hash" for n in every), shown
    assert plan["Actual Rows"] == LIMIT, shown


def test_without_the_steering_those_statistics_make_the_claim_read_the_backlog(
    misjudged: str,
) -> None:
    """The fixture's statistics do mislead the planner: on a plain session the same claim
    reads every group of the backlog once for every message (what the steering is for)."""
    claim = statements_for(NAMES, True).claim(0, 0)
    params = {"locked_by": "w#1", "visibility": 30.0, "min_priority": 0, "keys": []}
    with psycopg.connect(misjudged, autocommit=True) as conn:
        plan = generic_plan(conn, claim, params)
    read = max(n["Actual Rows"] * n["Actual Loops"] for n in nodes(plan) if on_groups(n))
    assert read >= BACKLOG * BACKLOG, json.dumps(plan, indent=1)[:3000]

"""The claim's plan on PostgreSQL (EXPLAIN): the walk of the groups is an index walk in
round-robin order that stops at the first eligible group, never a sort of the backlog, under
the generic plan a prepared statement settles on.

The claims with a priority floor and with routing keys are run (``EXPLAIN ANALYZE`` of the
prepared statement, forced generic, rolled back) behind 50,000 groups they must not take
(priority 0 and another routing key, at the front of the rotation) and 100,000 groups
in all: each walk reads one group row, whatever the backlog. Row counts, not times.

A batch's claim (``claim_many``) is the same walk going on past the first group: it reads the
group rows it leases and no others, locks ``limit`` of them (its statement is built for a
size, its LIMIT a literal, and ``limit`` at most that size is a parameter), and sorts only the
rows it took.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from psycopg import sql

from harel_sa import Event, PostgresTransport
from harel_sa.postgres.compiled import Statement
from harel_sa.postgres.driver import STEER
from harel_sa.postgres.statements import statements_for
from harel_sa.schema import Names

NAMES = Names()
FRONT = 50_000  # groups ahead in the rotation that a floor or a key claim must not walk
#: The types of the claim's parameters, as the driver sends them.
TYPES = {
    "locked_by": "text",
    "visibility": "float8",
    "min_priority": "integer",
    "keys": "text[]",
    "now": "float8",
    "limit": "integer",
    "tokens": "text[]",
}
SIZE, LIMIT = 32, 29  # a batch's statement is built for SIZE; LIMIT of them are asked for


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found += nodes(child)
    return found


def fed(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The nodes whose rows flow into ``plan``: not the CTEs and sub-plans beneath it, which a
    CTE Scan reads once they are done."""
    found = [plan]
    for child in plan.get("Plans", []):
        if child.get("Parent Relationship") not in ("InitPlan", "SubPlan"):
            found += fed(child)
    return found


def on_groups(node: dict[str, Any]) -> bool:
    return node.get("Relation Name") == NAMES.groups and "Scan" in node["Node Type"]


def generic_plan(
    conn: psycopg.Connection[Any],
    claim: Statement,
    params: dict[str, Any],
    *,
    whole: bool = False,
    steered: bool = True,
) -> Any:
    """The executed plan (``EXPLAIN ANALYZE``, rolled back) of ``claim`` as a prepared
    statement with a generic plan, the one psycopg's ``prepare=True`` settles on, planned
    after the settings the driver sends before it (``steered``, :data:`harel_sa.postgres.
    driver.STEER`); ``whole``: EXPLAIN's whole answer, its JIT section included."""
    order, prepared = claim.names, claim.sql.decode()
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        if steered and claim.steered:
            conn.execute(STEER.sql.decode())
        types = ", ".join(TYPES[name] for name in order)
        # The simple protocol: over the extended one the server takes the body's $n as the
        # PREPARE's own parameters.
        done = conn.pgconn.exec_(f"PREPARE claim_plan ({types}) AS {prepared}".encode())
        assert done.status == psycopg.pq.ExecStatus.COMMAND_OK, done.error_message
        # Literal arguments: a utility statement's parameters get no types.
        args = sql.SQL(", ").join(sql.Literal(params[name]) for name in order)
        explain = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE claim_plan({})").format(args)
        row = conn.execute(explain).fetchone()
    conn.execute("DEALLOCATE claim_plan")
    assert row is not None
    answer = row[0][0] if isinstance(row[0], list) else json.loads(row[0])[0]
    return answer if whole else answer["Plan"]


def test_the_claim_walks_the_round_robin_index_without_sorting(pg_url: str) -> None:
    with PostgresTransport(pg_url) as q:
        q.publish_many([(f"g{i}", Event(kind="m")) for i in range(5000)])
    claim = statements_for(NAMES, True).claim(0, 0)
    params = {"locked_by": "w#1", "visibility": 30.0, "min_priority": 0, "keys": []}
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ANALYZE")
        plan = generic_plan(conn, claim, params)
    every = nodes(plan)
    walks = [n for n in every if n.get("Index Name") == NAMES.groups_by_last_claimed]
    assert walks, json.dumps(plan, indent=1)[:3000]
    assert not any("Sort" in n["Node Type"] for n in every), json.dumps(plan, indent=1)[:3000]
    assert not any(
        n["Node Type"] == "Seq Scan" and n.get("Relation Name") == NAMES.groups for n in every
    )


@pytest.fixture(scope="module")
def crowded(pg_server: Any) -> Any:
    """100,000 groups of one message each: 50,000 of priority 0 with the key ``other`` at the
    front of the rotation, 47,000 of priority 2 with the key ``other``, and 3,000 of priority
    3 with the key ``east``, the ones a floor of 3 or the key ``east`` may take, at the back."""
    url = pg_server.create_database()
    PostgresTransport(url).close()  # the schema
    m, g = NAMES.messages, NAMES.groups
    with psycopg.connect(url, autocommit=True) as conn:
        for name, count, priority, key in [
            ("front", FRONT, 0, "other"),
            ("mid", 47_000, 2, "other"),
            ("back", 3_000, 3, "east"),
        ]:
            conn.execute(
                f"INSERT INTO {g} (group_id, priority, routing_key) "
                f"SELECT '{name}' || i, {priority}, '{key}' FROM generate_series(1, {count}) i"
            )
            conn.execute(
                f"INSERT INTO {m} (group_id, event) SELECT '{name}' || i, "
                f'\'{{"kind": "m"}}\' FROM generate_series(1, {count}) i'
            )
        conn.execute(f"UPDATE {g} SET last_claimed_at = 1 WHERE group_id LIKE 'mid%%'")
        conn.execute(f"UPDATE {g} SET last_claimed_at = 2 WHERE group_id LIKE 'back%%'")
        conn.execute("VACUUM ANALYZE")
    yield url
    pg_server.drop_database(url)


# Claims with a floor or keys, and the index each lane must walk.
LANES = pytest.mark.parametrize(
    ("min_priority", "keys", "index"),
    [
        (3, [], NAMES.groups_by_floor(3)),
        (1, [], NAMES.groups_by_floor(1)),
        (0, ["east"], NAMES.groups_by_routing_key),
        (0, ["west", "east"], NAMES.groups_by_routing_key),
    ],
    ids=["floor-3", "floor-1", "one-key", "two-keys"],
)


@LANES
def test_claims_with_a_floor_or_keys_walk_their_own_index_and_read_one_group(
    crowded: str, min_priority: int, keys: list[str], index: str
) -> None:
    claim = statements_for(NAMES, True).claim(min_priority, len(keys))
    params = {"locked_by": "w#1", "visibility": 30.0, "min_priority": min_priority, "keys": keys}
    with psycopg.connect(crowded, autocommit=True) as conn:
        plan = generic_plan(conn, claim, params)
    shown = json.dumps(plan, indent=1)[:4000]
    every = nodes(plan)
    walks = [n for n in every if on_groups(n) and n.get("Index Name") != f"{NAMES.groups}_pkey"]
    assert walks and {n.get("Index Name") for n in walks} == {index}, shown
    # Each walk stops at the first group it may lease: one row read, not the 50,000 ahead.
    assert all(n["Actual Rows"] <= 1 and n["Actual Loops"] == 1 for n in walks), shown
    assert sum(n["Actual Rows"] for n in walks) == 1, shown
    # No sort of groups: only the lanes' winners (one per key) are ever compared.
    for sort in (n for n in every if "Sort" in n["Node Type"]):
        assert not any(on_groups(n) for n in nodes(sort)), shown
    assert not any(n["Node Type"] == "Seq Scan" and on_groups(n) for n in every), shown


def batch_params(min_priority: int, keys: list[str]) -> dict[str, Any]:
    return {
        "limit": LIMIT,
        "tokens": [f"w#{i}" for i in range(LIMIT)],
        "visibility": 30.0,
        "min_priority": min_priority,
        "keys": keys,
    }


def test_the_batched_claim_walks_the_index_and_reads_only_the_groups_it_leases(
    pg_url: str,
) -> None:
    with PostgresTransport(pg_url) as q:
        q.publish_many([(f"g{i}", Event(kind="m")) for i in range(5000)])
    claim = statements_for(NAMES, True).claim_many(0, 0, SIZE)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ANALYZE")
        plan = generic_plan(conn, claim, batch_params(0, []))
    shown = json.dumps(plan, indent=1)[:6000]
    every = nodes(plan)
    walks = [n for n in every if n.get("Index Name") == NAMES.groups_by_last_claimed]
    # One walk, in round-robin order, that stops once LIMIT groups are locked: not SIZE, and
    # not the 5,000 of the backlog.
    assert len(walks) == 1 and walks[0]["Actual Rows"] == LIMIT, shown
    locks = [n for n in every if n["Node Type"] == "LockRows"]
    assert [n["Actual Rows"] for n in locks] == [LIMIT], shown
    assert plan["Actual Rows"] == LIMIT, shown  # each group locked is leased
    # Sorted: the rows taken (their rank, the tokens' order), never the groups.
    for sort in (n for n in every if "Sort" in n["Node Type"]):
        assert not any(on_groups(n) for n in fed(sort)), shown
    assert not any(n["Node Type"] == "Seq Scan" and on_groups(n) for n in every), shown


@LANES
def test_batched_claims_with_a_floor_or_keys_walk_their_own_index_past_the_backlog(
    crowded: str, min_priority: int, keys: list[str], index: str
) -> None:
    claim = statements_for(NAMES, True).claim_many(min_priority, len(keys), SIZE)
    with psycopg.connect(crowded, autocommit=True) as conn:
        plan = generic_plan(conn, claim, batch_params(min_priority, keys))
    shown = json.dumps(plan, indent=1)[:6000]
    every = nodes(plan)
    walks = [n for n in every if on_groups(n) and n.get("Index Name") != f"{NAMES.groups}_pkey"]
    assert walks and {n.get("Index Name") for n in walks} == {index}, shown
    # Each walk (a lane per key) reads at most SIZE group rows, not the 50,000 ahead.
    assert all(n["Actual Rows"] <= SIZE and n["Actual Loops"] == 1 for n in walks), shown
    assert sum(n["Actual Rows"] for n in walks) >= LIMIT, shown
    assert plan["Actual Rows"] == LIMIT, shown
    for sort in (n for n in every if "Sort" in n["Node Type"]):
        assert not any(on_groups(n) for n in fed(sort)), shown
    assert not any(n["Node Type"] == "Seq Scan" and on_groups(n) for n in every), shown


def test_the_claim_reads_a_group_by_its_key_behind_deep_groups(pg_url: str) -> None:
    """Few groups, deep ones, not vacuumed: the planner once read a group's rows by walking the
    primary key and filtering by group, so the claim of a group of one message published
    before 10 deep ones read every row after it (20,000 here). The head and the next seqs
    come from the group's own index, each row by its key; the group to touch is found by its
    key too, never by a hash over the groups."""
    with PostgresTransport(pg_url) as q:
        q.publish("lone", Event(kind="m"))
        q.publish_many([(f"g{i % 10}", Event(kind="m")) for i in range(20_000)])
    params = {"locked_by": "w#1", "visibility": 30.0, "min_priority": 0, "keys": []}
    single = statements_for(NAMES, True).claim(0, 0)
    batch = statements_for(NAMES, True).claim_many(0, 0, SIZE)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("ANALYZE")
        for claim, more in [(single, {}), (batch, batch_params(0, []))]:
            plan = generic_plan(conn, claim, {**params, **more})
            shown = json.dumps(plan, indent=1)[:6000]
            on_messages = [
                n
                for n in nodes(plan)
                if n.get("Relation Name") == NAMES.messages and "Scan" in n["Node Type"]
            ]
            assert on_messages, shown
            assert not any(n["Node Type"] == "Seq Scan" for n in on_messages), shown
            # Per group, each scan of the messages reads the head and the next row at most.
            read = [n["Actual Rows"] + n.get("Rows Removed by Filter", 0) for n in on_messages]
            assert max(read) <= 2, (read, shown)
            if claim is single:
                assert not any(n["Node Type"] == "Hash" for n in nodes(plan)), shown

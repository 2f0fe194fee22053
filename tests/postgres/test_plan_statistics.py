"""The claim's plan with the statistics of a queue analyzed while it was near-empty and all
leased, as autovacuum finds a queue that keeps up. With them the planner once priced the walk
of the groups as a scan of them all, chose a sort of every group (or the messages as the outer
side of the join: a claim quadratic in the backlog) and kept that plan while a backlog grew:
under load, a queue that stopped. The driver sends each claim after the planner's settings
for its transaction (:data:`harel_sa.postgres.driver.STEER`): every claim stays a walk of its
index that reads the groups it leases and no other, however wrong the statistics, on a
session of harel_sa's own or behind a transaction pooler. Row counts, not times.
"""

from __future__ import annotations

import json
import time
from typing import Any

import psycopg
import pytest

from harel_sa import Event, PostgresTransport
from harel_sa.postgres import wire
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


def misjudge(url: str) -> None:
    """Statistics taken of 30 groups whose heads were all leased; then a backlog of
    ``BACKLOG`` groups (half with the routing key ``east`` and priority 2) that autovacuum
    is kept from analyzing."""
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


@pytest.fixture(scope="module")
def misjudged(pg_server: Any) -> Any:
    url = pg_server.create_database()
    misjudge(url)
    yield url
    pg_server.drop_database(url)


def steered(url: str) -> psycopg.Connection[Any]:
    """A connection set up as harel_sa sets up its own (:func:`set_up`); ``generic_plan``
    sends the claim's settings before it, as the driver does."""
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
    reads (and sorts) every group of the backlog, where the steered one reads the first
    (what the steering is for)."""
    claim = statements_for(NAMES, True).claim(0, 0)
    params = {"locked_by": "w#1", "visibility": 30.0, "min_priority": 0, "keys": []}
    with steered(misjudged) as conn:
        plan = generic_plan(conn, claim, params, steered=False)
    read = max(n["Actual Rows"] * n["Actual Loops"] for n in nodes(plan) if on_groups(n))
    assert read >= BACKLOG, json.dumps(plan, indent=1)[:3000]


def _counts(url: str) -> tuple[int, int]:
    """The groups' sequential scans and the messages' updated rows, as the server counts."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT (SELECT seq_scan FROM pg_stat_user_tables WHERE relname = %s), "
            "(SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = %s)",
            (NAMES.groups, NAMES.messages),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.mark.parametrize(
    ("pooler", "pipelines"), [("auto", True), ("transaction", True), ("transaction", False)]
)
def test_a_transports_claim_is_steered_on_a_session_of_its_own_or_a_pooled_one(
    pg_url: str, pooler: str, pipelines: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim is sent after the settings, for its own transaction: also through a
    transaction pooler, where harel_sa sets nothing on the server's sessions (one round trip;
    without libpq's pipelines, one each, in the transaction the claim runs in)."""
    monkeypatch.setattr(wire, "PIPELINES", pipelines)
    misjudge(pg_url)
    scans, updated = _counts(pg_url)
    with PostgresTransport(pg_url, pooler=pooler) as q:  # type: ignore[arg-type]
        lease = q.claim("w", 30.0)
        assert lease is not None and lease.group_id == "j0"
        # And inside a transaction of its own: an ack with the next claim.
        acked, following = q.ack_and_claim(lease, "w", 30.0)
        assert acked and following is not None and following.group_id == "j1"
    # The claims' backends sent their statistics as they ended (the transport closed).
    deadline = time.monotonic() + 30
    while _counts(pg_url)[1] < updated + 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _counts(pg_url) == (scans, updated + 2)

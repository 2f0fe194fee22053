"""The claim walks an index and stops: no full scan, no sort of the groups (EXPLAIN QUERY PLAN)."""

from __future__ import annotations

import re
import sqlite3

import pytest

from harel_sa import SqliteTransport
from harel_sa.rules import LOOKAHEAD
from harel_sa.schema import Names
from harel_sa.sqlite.compiled import positional
from harel_sa.sqlite.statements import statements_for

NAMES = Names()
BASE_TABLES = {"g", "m", "x", "h", "c"}  # the aliases the claim gives its tables


def plan(db: str, min_priority: int, keys: int) -> list[tuple[int, int, str]]:
    SqliteTransport(db).close()
    sql = statements_for(NAMES).claim(min_priority, keys)
    params = (1.0, *(f"k{i}" for i in range(keys)))  # positional: (now, key0, ...)
    with sqlite3.connect(db) as conn:
        # A realistic shape so the planner's choices are the ones production sees.
        conn.executemany(
            f"INSERT INTO {NAMES.groups} (group_id, priority, routing_key) VALUES (?, ?, ?)",
            [(f"g{i}", i % 5, f"k{i % 3}") for i in range(2000)],
        )
        conn.executemany(
            f"INSERT INTO {NAMES.messages} (group_id, event) VALUES (?, '{{}}')",
            [(f"g{i % 2000}",) for i in range(6000)],
        )
        conn.execute("ANALYZE")
        return [(r[0], r[1], r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


CASES = [(0, 0), (2, 0), (4, 0), (0, 1), (0, 3), (3, 2)]


@pytest.mark.parametrize(("min_priority", "keys"), CASES)
def test_every_table_access_is_an_index_search_or_an_ordered_index_walk(
    db: str, min_priority: int, keys: int
) -> None:
    for _, _, detail in plan(db, min_priority, keys):
        scan = re.match(r"SCAN (\w+)", detail)
        if scan and scan.group(1) in BASE_TABLES:
            # The one walk allowed: the groups in claim order, on an index, stopping early.
            assert scan.group(1) == "g" and "USING INDEX" in detail, detail
        search = re.match(r"SEARCH (\w+)", detail)
        if search:
            assert "INDEX" in detail or "PRIMARY KEY" in detail, detail


def test_the_plain_claim_sorts_nothing(db: str) -> None:
    details = [d for _, _, d in plan(db, 0, 0)]
    assert not [d for d in details if "TEMP B-TREE" in d], details
    # The walk starts after the paused groups (harel_sa.flow.PAUSED_AT), in claim order.
    walk = f"SEARCH g USING INDEX {NAMES.groups_by_last_claimed} (last_claimed_at>?)"
    assert walk in details
    # What a pause or backoff holds back: a look at two keys of the controls' primary key.
    assert f"SEARCH c USING INDEX sqlite_autoindex_{NAMES.controls}_1 (target=?)" in details


@pytest.mark.parametrize(("min_priority", "keys"), [c for c in CASES if c != (0, 0)])
def test_lanes_sort_only_their_single_row_winners(db: str, min_priority: int, keys: int) -> None:
    rows = plan(db, min_priority, keys)
    children: dict[int, list[str]] = {}
    for _node, parent, detail in rows:
        children.setdefault(parent, []).append(detail)
    for _node, parent, detail in rows:
        if "TEMP B-TREE" in detail:
            # A temp sort may only order the lanes' results (each LIMIT 1), never a table.
            siblings = children[parent]
            assert any(s.startswith("SCAN (subquery") for s in siblings), (detail, siblings)
            assert not any(re.match(r"SCAN [ghmx]\b", s) for s in siblings), siblings
    walks = [d for _, _, d in rows if re.match(r"(SEARCH|SCAN) g\b", d)]
    index = NAMES.groups_by_routing_key if keys else NAMES.groups_by_priority
    assert walks and all(index in d for d in walks), walks


def test_the_in_flight_check_reads_the_head_and_a_bounded_look_ahead_only(db: str) -> None:
    # A deep group costs what a shallow one does: messages are reached only through the head's
    # MIN(seq) on (group_id, seq) and its rowid, plus the next LOOKAHEAD messages after the
    # head (a range on the same index, cut by LIMIT), never by a probe over the whole group.
    # A group that runs several at once (max_in_flight) is walked from its head one index
    # step at a time (the recursive ``w``), as far as its window: bounded by MAX_IN_FLIGHT.
    details = [d for _, _, d in plan(db, 0, 0)]
    messages = [d for d in details if re.match(r"(SEARCH|SCAN) [mxhyw]\b", d)]
    assert sorted(messages) == sorted(
        [
            "SCAN w",
            "SCAN w",
            f"SEARCH h USING COVERING INDEX {NAMES.messages_by_group} (group_id=?)",
            f"SEARCH h USING COVERING INDEX {NAMES.messages_by_group} (group_id=?)",
            "SEARCH m USING INTEGER PRIMARY KEY (rowid=?) LEFT-JOIN",
            "SEARCH x USING INTEGER PRIMARY KEY (rowid=?)",
            "SEARCH x USING INTEGER PRIMARY KEY (rowid=?)",
            f"SEARCH x USING INDEX {NAMES.messages_by_group} (group_id=? AND seq>?)",
            f"SEARCH y USING COVERING INDEX {NAMES.messages_by_group} (group_id=? AND seq>?)",
        ]
    ), details
    sql = statements_for(NAMES).claim(0, 0)
    assert f"ORDER BY x.seq LIMIT {LOOKAHEAD})" in sql


def test_a_positional_statement_numbers_its_names_in_the_order_given_and_misses_none() -> None:
    assert positional("x = :a AND y = :b OR z = :a", "b", "a") == "x = ?2 AND y = ?1 OR z = ?2"
    assert positional(":key1 :key10", "key10", "key1") == "?2 ?1"  # a name is a whole word
    with pytest.raises(ValueError, match=":b"):
        positional("x = :a AND y = :b", "a")

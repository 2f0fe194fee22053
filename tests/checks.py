"""Checks on a queue file's rows, shared by the contract, unit and process tests."""

from __future__ import annotations

import sqlite3
from typing import Any

from harel_sa import Names
from harel_sa.transports import Transport


def stranded(raw: sqlite3.Connection, names: Names | None = None) -> dict[str, int]:
    """Rows no claim can reach, or that say a group is busy with nothing in it (all 0 if sound)."""
    n = names or Names()
    m, g = n.messages, n.groups
    return {
        "message without group": raw.execute(
            f"SELECT count(*) FROM {m} m WHERE NOT EXISTS "
            f"(SELECT 1 FROM {g} g WHERE g.group_id = m.group_id)"
        ).fetchone()[0],
        "group without message": raw.execute(
            f"SELECT count(*) FROM {g} g WHERE NOT EXISTS "
            f"(SELECT 1 FROM {m} m WHERE m.group_id = g.group_id)"
        ).fetchone()[0],
        "locked without expiry": raw.execute(
            f"SELECT count(*) FROM {m} WHERE locked_by IS NOT NULL AND lock_expiry IS NULL"
        ).fetchone()[0],
    }


def stranded_names() -> tuple[str, ...]:
    """The kinds of stranded rows :func:`stranded` counts."""
    return ("message without group", "group without message", "locked without expiry")


def assert_nothing_stranded(raw: sqlite3.Connection) -> None:
    found = stranded(raw)
    assert not any(found.values()), found


def first_call(queue: Transport[Any]) -> None:
    """Call ``queue`` once (``stats``), then close it whatever happens: a transport built with
    ``create_schema=False`` on a schema that is not at head raises its SchemaError here."""
    with queue:
        queue.stats()

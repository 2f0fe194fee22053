"""The original stdlib transport's schema and writes, spelled as its design gives them.

Tests use it to make files "written by the original transport" (schema 3 or 4), with rows.
The events are the harel engine's own (``harel.spec.states.Event``), as it stores them; the
schema-3 files of the released engine come from harel's own transport (tests/harel/).
"""

from __future__ import annotations

import sqlite3

from harel.spec.states import Event


def schema(prefix: str = "harel", *, routing_key: bool) -> list[str]:
    m, g = f"{prefix}_transport_messages", f"{prefix}_transport_groups"
    ddl = [
        f"""CREATE TABLE IF NOT EXISTS {m} (
  seq          INTEGER PRIMARY KEY AUTOINCREMENT,
  group_id     TEXT NOT NULL,
  event        TEXT NOT NULL,
  locked_by    TEXT,
  lock_expiry  REAL
)""",
        f"""CREATE TABLE IF NOT EXISTS {g} (
  group_id       TEXT PRIMARY KEY,
  last_claimed_at REAL NOT NULL DEFAULT 0.0,
  priority        INT  NOT NULL DEFAULT 0
)""",
        f"CREATE INDEX IF NOT EXISTS {g}_by_last_claimed ON {g} (last_claimed_at)",
        f"CREATE INDEX IF NOT EXISTS {m}_by_group ON {m} (group_id, seq)",
    ]
    if routing_key:
        ddl += [
            f"ALTER TABLE {g} ADD COLUMN routing_key TEXT",
            f"CREATE INDEX IF NOT EXISTS {g}_by_routing_key ON {g} (routing_key, last_claimed_at)",
        ]
    return ddl


def event_json(kind: str, **data: object) -> str:
    return Event(kind=kind, data=data).model_dump_json()


class LegacyFile:
    """A file as the original transport leaves it: its DDL, its two-statement publish."""

    def __init__(self, path: str, prefix: str = "harel", *, routing_key: bool) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.m, self.g = f"{prefix}_transport_messages", f"{prefix}_transport_groups"
        self.routing_key = routing_key
        for ddl in schema(prefix, routing_key=routing_key):
            self.conn.execute(ddl)

    def publish(self, group_id: str, kind: str, priority: int = 0, *, orphan: bool = False) -> int:
        cur = self.conn.execute(
            f"INSERT INTO {self.m} (group_id, event) VALUES (?, ?)", (group_id, event_json(kind))
        )
        if not orphan:  # a crash between the two autocommit statements leaves an orphan
            self.conn.execute(
                f"INSERT OR IGNORE INTO {self.g} (group_id, priority) VALUES (?, ?)",
                (group_id, priority),
            )
        return int(cur.lastrowid or 0)

    def lease(self, seq: int, locked_by: str, expiry: float) -> None:
        self.conn.execute(
            f"UPDATE {self.m} SET locked_by = ?, lock_expiry = ? WHERE seq = ?",
            (locked_by, expiry, seq),
        )

    def rows(self) -> list[tuple[object, ...]]:
        return self.conn.execute(
            f"SELECT seq, group_id, event, locked_by, lock_expiry FROM {self.m} ORDER BY seq"
        ).fetchall()

    def close(self) -> None:
        self.conn.close()

"""``harel-sa db upgrade | current | check | sql``: harel_sa's Alembic history on a database.

Each prefix records its revision in its own version table (``<prefix>_transport_alembic_version``),
so several prefixes in one file move apart. ``upgrade`` is the only one that writes (and may
create the file); ``current`` and ``check`` only read; ``sql`` prints the DDL without a database.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass

from harel_sa import history as migrations
from harel_sa.cli.common import (
    FAILED,
    OK,
    Commands,
    Target,
    add_db_options,
    add_json_option,
    add_prefix_option,
    emit,
    prefix,
    target,
)


def register(commands: Commands) -> None:
    db = commands.add_parser(
        "db",
        help="migrate the schema: upgrade, current, check, sql",
        description="harel_sa's Alembic history on a database, per prefix.",
    )
    sub = db.add_subparsers(dest="db_command", metavar="{upgrade,current,check,sql}", required=True)

    upgrade = sub.add_parser(
        "upgrade",
        help="bring the prefix's tables to a revision (default: heads), keeping every row",
        description="Create or upgrade the prefix's tables in one transaction; creates the "
        "file if it does not exist. Works on files of the original stdlib transport too.",
    )
    add_db_options(upgrade)
    upgrade.add_argument("--revision", default="heads", help="target revision (default: heads)")
    add_json_option(upgrade)
    upgrade.set_defaults(func=cmd_upgrade)

    current = sub.add_parser(
        "current",
        help="the revision recorded for the prefix",
        description="Print the revision(s) recorded for the prefix and the head; never writes.",
    )
    add_db_options(current)
    add_json_option(current)
    current.set_defaults(func=cmd_current)

    check = sub.add_parser(
        "check",
        help="exit 0 when the prefix is at head, 1 when it is not",
        description="Exit 0 when the prefix's recorded revision is harel_sa's head, else 1.",
    )
    add_db_options(check)
    add_json_option(check)
    check.set_defaults(func=cmd_check)

    sql = sub.add_parser(
        "sql",
        help="print the DDL of an upgrade from nothing (no database needed)",
        description="Print the SQL an upgrade from an empty database to REVISION would run, "
        "for review; touches no database.",
    )
    add_prefix_option(sql)
    sql.add_argument("--revision", default="heads", help="target revision (default: heads)")
    sql.set_defaults(func=cmd_sql)


def _revisions(revisions: Sequence[str]) -> str:
    return ", ".join(revisions) if revisions else "(none)"


@dataclass(frozen=True)
class Position:
    """Where a prefix stands in the history."""

    current: tuple[str, ...]
    heads: tuple[str, ...]

    @property
    def at_head(self) -> bool:
        return set(self.current) == set(self.heads)

    def json(self) -> dict[str, object]:
        return {"current": list(self.current), "heads": list(self.heads), "at_head": self.at_head}


def _position(t: Target) -> Position:
    return Position(migrations.current(t.api, prefix=t.prefix), migrations.heads())


def cmd_upgrade(args: argparse.Namespace) -> int:
    t = target(args, must_exist=False)
    existed = t.path is None or os.path.exists(t.path)
    before = migrations.current(t.api, prefix=t.prefix) if existed else ()
    migrations.upgrade(t.api, prefix=t.prefix, revision=args.revision)
    after = _position(t)
    emit(
        args,
        {"before": list(before), **after.json()},
        f"{t.api} (prefix {t.prefix}): {_revisions(before)} -> {_revisions(after.current)}",
    )
    return OK


def cmd_current(args: argparse.Namespace) -> int:
    where = _position(target(args, must_exist=True))
    mark = "at head" if where.at_head else f"head is {_revisions(where.heads)}"
    emit(args, where.json(), f"{_revisions(where.current)} ({mark})")
    return OK


def cmd_check(args: argparse.Namespace) -> int:
    t = target(args, must_exist=True)
    where = _position(t)
    if where.at_head:
        emit(args, where.json(), f"ok: prefix {t.prefix} is at head ({_revisions(where.heads)})")
        return OK
    emit(
        args,
        where.json(),
        f"behind: prefix {t.prefix} is at {_revisions(where.current)}, head is "
        f"{_revisions(where.heads)}; run `harel-sa db upgrade {t.flag} --prefix {t.prefix}`",
    )
    return FAILED


def cmd_sql(args: argparse.Namespace) -> int:
    print(migrations.sql(prefix=prefix(args.prefix), revision=args.revision), end="")
    return OK

"""``harel-sa db``: harel_sa's Alembic history on a database, per prefix.

``current`` and ``check`` read the revision wherever the file keeps it (harel_sa's own version
table, or the host's Alembic history: :mod:`harel_sa.revision_state`), read-only, exactly as a
transport opened with ``create_schema=False`` checks it; ``check`` is the deploy gate. ``upgrade``,
``downgrade`` and ``stamp`` write harel_sa's own record (standalone) and refuse a prefix whose
revision the host's history keeps. ``history`` and ``sql`` need no database.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from harel_sa.cli.common import (
    FAILED,
    OK,
    SCHEMA,
    USAGE,
    CliError,
    Commands,
    Target,
    add_db_options,
    add_json_option,
    add_prefix_option,
    emit,
    prefix,
    server_errors,
    table,
    target,
)

if TYPE_CHECKING:
    from harel_sa.revision_state import State

_COMMANDS = "{upgrade,downgrade,stamp,current,check,history,sql}"


def register(commands: Commands) -> None:
    db = commands.add_parser(
        "db",
        help="migrate the schema: upgrade, downgrade, stamp, current, check, history, sql",
        description="harel_sa's Alembic history on a database, per prefix.",
    )
    sub = db.add_subparsers(dest="db_command", metavar=_COMMANDS, required=True)

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

    downgrade = sub.add_parser(
        "downgrade",
        help="step the prefix's tables back to a revision, keeping every row it can",
        description="Step back to REVISION (an id, -1, or base) in one transaction. A step "
        "that would destroy queued messages, routing keys, dead letters or delivery counts "
        "refuses (exit 1, nothing changed) unless --force.",
    )
    add_db_options(downgrade)
    downgrade.add_argument("--revision", required=True, help="target revision (an id, -1, base)")
    downgrade.add_argument(
        "--force", action="store_true", help="go on even where rows are destroyed"
    )
    add_json_option(downgrade)
    downgrade.set_defaults(func=cmd_downgrade)

    stamp = sub.add_parser(
        "stamp",
        help="record a revision without running anything (adoption, repair)",
        description="Record REVISION in the prefix's own version table without running any "
        "migration; `--revision base` removes harel_sa's own record.",
    )
    add_db_options(stamp)
    stamp.add_argument("--revision", required=True, help="the revision to record (or base)")
    add_json_option(stamp)
    stamp.set_defaults(func=cmd_stamp)

    for name, func, summary in (
        ("current", cmd_current, "the revision recorded for the prefix, and where"),
        ("check", cmd_check, "exit 0 only when the prefix is exactly at head (the deploy gate)"),
    ):
        p = sub.add_parser(
            name,
            help=summary,
            description=f"{summary[0].upper()}{summary[1:]}; reads the file read-only, as a "
            "transport opened with create_schema=False checks it.",
        )
        add_db_options(p)
        p.add_argument(
            "--version-table",
            metavar="NAME",
            help="the host's Alembic version table to read (default: found by its shape)",
        )
        add_json_option(p)
        p.set_defaults(func=func)

    history = sub.add_parser(
        "history",
        help="harel_sa's revisions, oldest first",
        description="harel_sa's revisions, oldest first; no database needed.",
    )
    add_json_option(history)
    history.set_defaults(func=cmd_history)

    sql = sub.add_parser(
        "sql",
        help="print the DDL of an upgrade from nothing (no database needed)",
        description="Print the SQL an upgrade from an empty database to REVISION (or a range "
        "START:END) would run, for review; touches no database.",
    )
    add_prefix_option(sql)
    sql.add_argument("--revision", default="heads", help="target revision (default: heads)")
    sql.add_argument(
        "--url",
        metavar="URL",
        help="print this database's dialect (postgresql://... for PostgreSQL's DDL; default: "
        "SQLite's); it is not connected to",
    )
    sql.set_defaults(func=cmd_sql)


@contextmanager
def _alembic() -> Iterator[None]:
    """Alembic's refusals as one plain line: exit 1 for a downgrade that would destroy rows,
    else 2 (an unknown or impossible revision, a prefix the host's history keeps)."""
    from alembic.util import CommandError

    try:
        yield
    except CommandError as exc:
        message = str(exc).removeprefix("harel_sa: ")
        raise CliError(message, FAILED if "would destroy" in message else USAGE) from exc


def _target(args: argparse.Namespace, *, must_exist: bool) -> Target:
    """``--db``/``--url`` as :func:`~harel_sa.cli.common.target` checks it; a
    ``postgresql://`` URL names a database on a server (nothing to check on disk)."""
    from harel_sa.postgres.connect import is_postgresql

    if args.url and is_postgresql(args.url):
        return Target(args.url, None, prefix(args.prefix), is_url=True)
    return target(args, must_exist=must_exist)


def _state(t: Target, version_table: str | None = None) -> State:
    from harel_sa.postgres.connect import is_postgresql
    from harel_sa.sqlite.startup import read_target

    if t.path is None and is_postgresql(t.api):
        from harel_sa.postgres.connect import read_state

        with server_errors(t):
            return read_state(t.api, prefix=t.prefix, version_table=version_table)
    return read_target(t.api, prefix=t.prefix, version_table=version_table)


def _revisions(revisions: tuple[str, ...] | list[str]) -> str:
    return ", ".join(revisions) if revisions else "(none)"


def _json(s: State, t: Target) -> dict[str, Any]:
    from harel_sa.schema import HEAD_REVISION

    record = s.record
    return {
        "prefix": s.names.prefix,
        "current": list(s.current),
        "heads": [HEAD_REVISION],  # a test holds it equal to the revisions' one head
        "at_head": s.ok,
        "recorded_in": record.table if record else None,
        "records": [
            {"table": r.table, "revisions": list(r.revisions), "own": r.own} for r in s.records
        ],
        "missing": list(s.missing),
        "problem": s.problem(t.flag),
    }


def _where(s: State) -> str:
    if s.disagree:
        return "recorded twice, and the records disagree"
    if s.record is None:
        return "no revision recorded"
    return f"recorded in {s.record.table} ({s.record.kind})"


def _resolved(revision: str) -> str:
    """The one revision id ``revision`` names (``heads``: the head); ``""`` for ``base`` or a
    relative step. An unknown revision is a usage error."""
    from harel_sa.history import resolve, script

    resolve(revision)
    if revision == "base" or re.fullmatch(r"[+-]\d+", revision):
        return ""
    found = script().revision_map.get_revisions(revision)
    one = found[0] if len(found) == 1 else None
    return "" if one is None or isinstance(one, str) else one.revision


def _moved(t: Target, args: argparse.Namespace, before: State, verb: str, wanted: str = "") -> int:
    after = _state(t)
    if wanted and after.current != (wanted,):
        # The revisions ran, yet the database reads elsewhere: never report that as done.
        raise CliError(
            f"{verb} to {wanted}, but prefix {t.prefix} reads at "
            f"{_revisions(after.current)} afterwards: did the migration and the reading "
            "reach different schemas?",
            SCHEMA,
        )
    data = _json(after, t)
    note = "" if after.ok else f" (head is {_revisions(data['heads'])})"
    emit(
        args,
        {"before": list(before.current), **data},
        f"{t.shown} (prefix {t.prefix}): {verb} {_revisions(before.current)} -> "
        f"{_revisions(after.current)}{note}",
    )
    return OK


def _refuse_integrated(s: State, t: Target, what: str) -> None:
    from harel_sa.revision_state import PIPELINE

    if s.integrated and not any(r.own for r in s.records):
        raise CliError(
            f"prefix {t.prefix}'s revision is kept by your Alembic history "
            f"({s.records[0].describe()}): {what} it there ({PIPELINE}, "
            f"`alembic downgrade harel_sa@-1`); `harel-sa db` would start a second record"
        )


def cmd_upgrade(args: argparse.Namespace) -> int:
    from harel_sa import history

    t = _target(args, must_exist=False)
    wanted = _resolved(args.revision)
    before = _state(t)  # a file that does not exist yet reads as empty
    _refuse_integrated(before, t, "upgrade")
    at = before.current[0] if len(before.current) == 1 else ""
    if wanted and at and wanted < at:
        raise CliError(
            f"{wanted} is older than prefix {t.prefix}'s {at}: an upgrade only goes forward; "
            f"to step back run `harel-sa db downgrade {t.flag} --prefix {t.prefix} "
            f"--revision {wanted}`"
        )
    with _alembic():
        history.upgrade(t.api, prefix=t.prefix, revision=args.revision)
    return _moved(t, args, before, "upgraded", wanted)


def cmd_downgrade(args: argparse.Namespace) -> int:
    from harel_sa import history

    t = _target(args, must_exist=True)
    wanted = _resolved(args.revision)
    before = _state(t)
    _refuse_integrated(before, t, "downgrade")
    at = before.current[0] if len(before.current) == 1 else ""
    if wanted and at and wanted > at:
        raise CliError(
            f"{wanted} is newer than prefix {t.prefix}'s {at}: a downgrade only goes back; "
            f"to go forward run `harel-sa db upgrade {t.flag} --prefix {t.prefix} "
            f"--revision {wanted}`"
        )
    with _alembic():
        history.downgrade(t.api, args.revision, prefix=t.prefix, force=args.force)
    return _moved(t, args, before, "downgraded", wanted)


def cmd_stamp(args: argparse.Namespace) -> int:
    from harel_sa import history

    t = _target(args, must_exist=True)
    _resolved(args.revision)
    before = _state(t)
    if args.revision != "base":
        _refuse_integrated(before, t, "stamp")
    with _alembic():
        history.stamp(t.api, args.revision, prefix=t.prefix)
    return _moved(t, args, before, "stamped")


def cmd_current(args: argparse.Namespace) -> int:
    t = _target(args, must_exist=True)
    s = _state(t, args.version_table)
    data = _json(s, t)
    mark = "at head" if s.ok else f"head is {_revisions(data['heads'])}"
    if not s.present:
        emit(args, data, f"(none) ({mark}): {data['problem']}")
        return OK
    lines = [f"{_revisions(s.current)} ({mark}), {_where(s)}"]
    lines += [f"  {r.table} ({r.kind}): {r.says}" for r in s.records if len(s.records) > 1]
    if s.missing:
        lines.append("  missing " + ", ".join(s.missing))
    emit(args, data, "\n".join(lines))
    return OK


def cmd_check(args: argparse.Namespace) -> int:
    t = _target(args, must_exist=True)
    s = _state(t, args.version_table)
    data = _json(s, t)
    if s.ok:
        emit(args, data, f"ok: prefix {t.prefix} is at head ({s.current[0]}), {_where(s)}")
        return OK
    emit(args, data, f"not ok: {data['problem']}")
    return FAILED


def cmd_history(args: argparse.Namespace) -> int:
    from harel_sa.history import heads, revisions

    found = revisions()
    rows = [
        (r.revision, r.down_revision or "(base)", "head" if r.revision in heads() else "", r.doc)
        for r in found
    ]
    emit(
        args,
        [{"revision": r.revision, "down_revision": r.down_revision, "doc": r.doc} for r in found],
        table(["revision", "revises", "", "what it does"], rows),
    )
    return OK


def cmd_sql(args: argparse.Namespace) -> int:
    from harel_sa import history

    chosen = prefix(args.prefix)
    for part in args.revision.split(":"):
        history.resolve(part)
    with _alembic():
        print(history.sql(prefix=chosen, revision=args.revision, url=args.url), end="")
    return OK

"""Scheduled messages and keyed messages: the scheduled table and messages.message_key.

Revision ID: harel_sa_0007
Revises: harel_sa_0006
Create Date: 2026-12-05

A message published with a delay (or a due time) waits in ``<prefix>_transport_scheduled``,
apart from the queue, so it holds up no group and costs a claim one probe of
``scheduled_by_due``; claims move the due ones to their groups' tails. ``message_key``
(on both tables,
NULL for every row written before or by other programs) names a message of which at most one
waits per prefix; ``messages_by_key`` and ``scheduled_by_key`` index only keyed rows.

Online: on PostgreSQL the new table and its indexes are made in one short transaction (nothing
reads it yet), the column is added alone (a moment's lock, retried) and its index built
``CONCURRENTLY``; on SQLite one short transaction. The previous release's workers and
producers go on meanwhile: they never read the new table, and the new column is nullable.

Frozen: this file spells its own SQL and guards (SQLite's and PostgreSQL's) and imports nothing
from harel_sa, so it does the same in every release; tests/migrations/golden/ holds its
``upgrade --sql`` output on each dialect.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

from alembic import context, op
from alembic.util import CommandError
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

revision: str = "harel_sa_0007"
down_revision: str | Sequence[str] | None = "harel_sa_0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _dialect() -> str:
    """``sqlite`` or ``postgresql``: online the connection's, offline the configured URL's."""
    return str(context.get_context().dialect.name)


def _prefix() -> str:
    """Config.attributes["harel_sa_prefix"], then -x prefix=, then the ini's harel_sa_prefix,
    else "harel"; SQLite names ignore case, so the prefix is lowercased."""
    config = context.config
    prefix = config.attributes.get("harel_sa_prefix")
    if prefix is None:
        prefix = context.get_x_argument(as_dictionary=True).get("prefix")
    if prefix is None:
        prefix = config.get_main_option("harel_sa_prefix")
    prefix = "harel" if prefix is None else str(prefix)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,29}", prefix):
        raise CommandError(f"harel_sa: prefix {prefix!r} must match [A-Za-z_][A-Za-z0-9_]{{0,29}}")
    return prefix.lower()


def _columns(table: str) -> set[str] | None:
    """The columns of ``table`` (empty when it does not exist); ``None`` offline (--sql), where
    nothing can be looked at and the guarded statements are printed unconditionally."""
    if context.is_offline_mode():
        return None
    rows = op.get_bind().exec_driver_sql(f"PRAGMA table_info({table})").fetchall()
    return {str(row[1]).lower() for row in rows}


def _refuse_a_bare_step_across_heads() -> None:
    """``downgrade -1`` in a host with two heads (its own and harel_sa's) may pick harel_sa's:
    refuse it, naming the branch-qualified commands."""
    if context.is_offline_mode():
        return
    migration = op.get_context()
    destination = str(migration.opts.get("destination_rev"))
    heads = sorted(migration.get_current_heads())
    if re.fullmatch(r"-\d+", destination) and len(heads) > 1:
        raise CommandError(
            f"harel_sa: `downgrade {destination}` with several heads ({', '.join(heads)}) "
            "would step back harel_sa's queue, not (only) your application; name the branch: "
            "`alembic downgrade app@-1` (your branch label) or `alembic downgrade harel_sa@-1`"
        )


#: PostgreSQL, online (:func:`_online`): the longest one statement waits for a lock (the
#: workers' calls queued behind it then go on), the longest it runs, and how long the revision
#: keeps trying before it gives up.
LOCK_TIMEOUT = "1s"
STATEMENT_TIMEOUT = "15min"
GIVE_UP_AFTER = 120.0
#: lock_not_available, deadlock_detected: the statement gave its locks back; try it again.
_TRY_AGAIN = ("55P03", "40P01")


def _online(*steps: str | tuple[str, ...]) -> None:
    """Run ``steps`` on PostgreSQL while workers and producers run: outside the migration's
    transaction, so no lock is held from one step to the next (a step is one statement, or a
    tuple of them run as one transaction). Each waits at most LOCK_TIMEOUT for a lock, then
    gives it back and is tried again after a growing pause, until GIVE_UP_AFTER seconds; an
    index a broken ``CONCURRENTLY`` build left invalid is dropped before it is built again, so
    an interrupted upgrade resumes. Offline (``--sql``), the statements in that order."""
    with op.get_context().autocommit_block():
        if context.is_offline_mode():
            op.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
            op.execute(f"SET statement_timeout = '{STATEMENT_TIMEOUT}'")
            for step in steps:
                for sql in _statements(step):
                    op.execute(sql)
            op.execute("RESET lock_timeout")
            op.execute("RESET statement_timeout")
            return
        bind = op.get_bind()
        saved = bind.execute(
            text("SELECT current_setting('lock_timeout'), current_setting('statement_timeout')")
        ).one()
        bind.exec_driver_sql(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
        bind.exec_driver_sql(f"SET statement_timeout = '{STATEMENT_TIMEOUT}'")
        try:
            for step in steps:
                _until_done(bind, step)
        finally:
            bind.execute(
                text(
                    "SELECT set_config('lock_timeout', :lock, false), "
                    "set_config('statement_timeout', :statement, false)"
                ),
                {"lock": saved[0], "statement": saved[1]},
            )


def _statements(step: str | tuple[str, ...]) -> tuple[str, ...]:
    return (step,) if isinstance(step, str) else ("BEGIN", *step, "COMMIT")


def _until_done(bind: Any, step: str | tuple[str, ...]) -> None:
    deadline = time.monotonic() + GIVE_UP_AFTER
    pause = 0.05
    while True:
        try:
            _drop_if_invalid(bind, step)
            for sql in _statements(step):
                bind.exec_driver_sql(sql)
            return
        except DBAPIError as exc:
            if not isinstance(step, str):
                bind.exec_driver_sql("ROLLBACK")
            code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
            if code not in _TRY_AGAIN:
                raise
            if time.monotonic() + pause > deadline:
                raise CommandError(
                    f"harel_sa: {revision} gave up after {GIVE_UP_AFTER:.0f} s: another session "
                    f"kept a lock it needs (look for long or idle transactions in "
                    f"pg_stat_activity), so it waited {LOCK_TIMEOUT} at a time and let the "
                    f"queue go on between; what it did so far stays, and running the upgrade "
                    f"again resumes it. Waiting on: {_statements(step)[-1][:120]}"
                ) from exc
        time.sleep(pause)
        pause = min(pause * 2, 2.0)


def _drop_if_invalid(bind: Any, step: str | tuple[str, ...]) -> None:
    """A ``CREATE INDEX CONCURRENTLY`` that failed or was killed leaves its index invalid
    (present, never used): drop it, so the build is made again, not skipped as existing."""
    words = step.split() if isinstance(step, str) else []
    if words[:3] != ["CREATE", "INDEX", "CONCURRENTLY"]:
        return
    name = words[6]
    invalid = bind.execute(
        text(
            "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = :name AND NOT i.indisvalid "
            "AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())"
        ),
        {"name": name},
    ).scalar()
    if invalid:
        bind.exec_driver_sql(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


def _refuse_to_destroy(prefix: str, table: str, where: str, what: str) -> None:
    """Refuse this step when it would destroy rows of ``table`` matching ``where``, unless
    forced: ``-x force=1`` on the command line or Config.attributes["harel_sa_force"]."""
    if context.is_offline_mode():
        return
    bind = op.get_bind()
    if _dialect() == "postgresql":
        exists = bind.exec_driver_sql(
            "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = %s",
            (table,),
        ).scalar()
    else:
        exists = bind.exec_driver_sql(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND lower(name) = ?", (table,)
        ).scalar()
    rows = exists and bind.exec_driver_sql(f"SELECT count(*) FROM {table} WHERE {where}").scalar()
    force = context.get_x_argument(as_dictionary=True).get("force", "")
    forced = context.config.attributes.get("harel_sa_force") or force.lower() in ("1", "true")
    if rows and not forced:
        raise CommandError(
            f"harel_sa: downgrading {revision} under prefix {prefix!r} would destroy {rows} "
            f"{what}; this step changed nothing. To lose them, force it: `-x force=1` (alembic) "
            "or `--force` (harel-sa db downgrade)"
        )


def _scheduled_table(p: str, seq: str, time_type: str, count: str) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {p}_transport_scheduled (\n"
        f"    seq {seq},\n"
        "    group_id TEXT NOT NULL,\n"
        "    event TEXT NOT NULL,\n"
        f"    due_at {time_type} NOT NULL,\n"
        f"    priority {count} DEFAULT 0 NOT NULL,\n"
        "    routing_key TEXT,\n"
        "    message_key TEXT" + (",\n    PRIMARY KEY (seq)\n)" if "IDENTITY" in seq else "\n)")
    )


def upgrade() -> None:
    p = _prefix()
    if _dialect() == "postgresql":
        _online(
            (
                _scheduled_table(
                    p, "BIGINT GENERATED BY DEFAULT AS IDENTITY", "DOUBLE PRECISION", "BIGINT"
                ),
                f"CREATE INDEX IF NOT EXISTS {p}_transport_scheduled_by_due "
                f"ON {p}_transport_scheduled (due_at, seq)",
                f"CREATE INDEX IF NOT EXISTS {p}_transport_scheduled_by_key "
                f"ON {p}_transport_scheduled (message_key) WHERE message_key IS NOT NULL",
            ),
            f"ALTER TABLE {p}_transport_messages ADD COLUMN IF NOT EXISTS message_key TEXT",
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {p}_transport_messages_by_key "
            f"ON {p}_transport_messages (message_key) WHERE message_key IS NOT NULL",
        )
        return
    op.execute(_scheduled_table(p, "INTEGER PRIMARY KEY AUTOINCREMENT", "REAL", "INTEGER"))
    op.execute(
        f"CREATE INDEX IF NOT EXISTS {p}_transport_scheduled_by_due "
        f"ON {p}_transport_scheduled (due_at)"
    )
    op.execute(
        f"CREATE INDEX IF NOT EXISTS {p}_transport_scheduled_by_key "
        f"ON {p}_transport_scheduled (message_key) WHERE message_key IS NOT NULL"
    )
    present = _columns(f"{p}_transport_messages")
    if present is None or "message_key" not in present:
        op.execute(f"ALTER TABLE {p}_transport_messages ADD COLUMN message_key TEXT")
    op.execute(
        f"CREATE INDEX IF NOT EXISTS {p}_transport_messages_by_key "
        f"ON {p}_transport_messages (message_key) WHERE message_key IS NOT NULL"
    )


def downgrade() -> None:
    p = _prefix()
    _refuse_a_bare_step_across_heads()
    _refuse_to_destroy(
        p,
        f"{p}_transport_scheduled",
        "1 = 1",
        "scheduled message(s) (they are not due yet; nothing older can hold them)",
    )
    _refuse_to_destroy(
        p,
        f"{p}_transport_messages",
        "message_key IS NOT NULL",
        "message key(s) (keyed messages would stay, their keys lost)",
    )
    if _dialect() == "postgresql":
        _online(
            f"DROP INDEX CONCURRENTLY IF EXISTS {p}_transport_messages_by_key",
            f"ALTER TABLE {p}_transport_messages DROP COLUMN IF EXISTS message_key",
            f"DROP TABLE IF EXISTS {p}_transport_scheduled",
        )
        return
    op.execute(f"DROP INDEX IF EXISTS {p}_transport_messages_by_key")
    present = _columns(f"{p}_transport_messages")
    if present is None or "message_key" in present:
        op.execute(f"ALTER TABLE {p}_transport_messages DROP COLUMN message_key")
    op.execute(f"DROP INDEX IF EXISTS {p}_transport_scheduled_by_key")
    op.execute(f"DROP INDEX IF EXISTS {p}_transport_scheduled_by_due")
    op.execute(f"DROP TABLE IF EXISTS {p}_transport_scheduled")

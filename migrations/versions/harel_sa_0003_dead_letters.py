"""Dead letters: messages.deliveries and the dead table.

Revision ID: harel_sa_0003
Revises: harel_sa_0002
Create Date: 2026-11-29

Frozen: this file spells its own SQL and guards (SQLite's and PostgreSQL's) and imports nothing
from harel_sa, so it does the same in every release; tests/migrations/golden/ holds its
``upgrade --sql`` output on each dialect.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from alembic import context, op
from alembic.util import CommandError

revision: str = "harel_sa_0003"
down_revision: str | Sequence[str] | None = "harel_sa_0002"
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


def upgrade() -> None:
    p = _prefix()
    if _dialect() == "postgresql":
        _upgrade_postgresql(p)
        return
    present = _columns(f"{p}_transport_messages")
    if present is None or "deliveries" not in present:
        op.execute(
            f"ALTER TABLE {p}_transport_messages ADD COLUMN deliveries INTEGER NOT NULL DEFAULT 0"
        )
    op.execute(
        f"CREATE TABLE IF NOT EXISTS {p}_transport_dead (\n"
        "    seq INTEGER NOT NULL,\n"
        "    group_id TEXT NOT NULL,\n"
        "    event TEXT NOT NULL,\n"
        "    error TEXT NOT NULL,\n"
        "    dead_at REAL NOT NULL,\n"
        "    deliveries INTEGER NOT NULL,\n"
        "    priority INTEGER DEFAULT 0 NOT NULL,\n"
        "    routing_key TEXT,\n"
        "    PRIMARY KEY (seq)\n"
        ")"
    )
    op.execute(
        f"CREATE INDEX IF NOT EXISTS {p}_transport_dead_by_group "
        f"ON {p}_transport_dead (group_id, seq)"
    )


def _upgrade_postgresql(p: str) -> None:
    """The same on PostgreSQL: ``seq`` a BIGINT (a message's), ``dead_at`` DOUBLE PRECISION."""
    op.execute(
        f"ALTER TABLE {p}_transport_messages "
        "ADD COLUMN IF NOT EXISTS deliveries INTEGER NOT NULL DEFAULT 0"
    )
    op.execute(
        f"CREATE TABLE IF NOT EXISTS {p}_transport_dead (\n"
        "    seq BIGINT NOT NULL,\n"
        "    group_id TEXT NOT NULL,\n"
        "    event TEXT NOT NULL,\n"
        "    error TEXT NOT NULL,\n"
        "    dead_at DOUBLE PRECISION NOT NULL,\n"
        "    deliveries INTEGER NOT NULL,\n"
        "    priority INTEGER DEFAULT 0 NOT NULL,\n"
        "    routing_key TEXT,\n"
        "    PRIMARY KEY (seq)\n"
        ")"
    )
    op.execute(
        f"CREATE INDEX IF NOT EXISTS {p}_transport_dead_by_group "
        f"ON {p}_transport_dead (group_id, seq)"
    )


def downgrade() -> None:
    p = _prefix()
    _refuse_a_bare_step_across_heads()
    _refuse_to_destroy(
        p,
        f"{p}_transport_dead",
        "1 = 1",
        "dead letter(s) (keep them: `harel-sa dead requeue` first)",
    )
    _refuse_to_destroy(
        p,
        f"{p}_transport_messages",
        "deliveries > 0",
        "message delivery count(s) (they would restart at 0)",
    )
    op.execute(f"DROP INDEX IF EXISTS {p}_transport_dead_by_group")
    op.execute(f"DROP TABLE IF EXISTS {p}_transport_dead")
    if _dialect() == "postgresql":
        op.execute(f"ALTER TABLE {p}_transport_messages DROP COLUMN IF EXISTS deliveries")
        return
    present = _columns(f"{p}_transport_messages")
    if present is None or "deliveries" in present:
        op.execute(f"ALTER TABLE {p}_transport_messages DROP COLUMN deliveries")

"""messages.enqueued_at; the routing-key index only over groups that have a routing key.

Revision ID: harel_sa_0005
Revises: harel_sa_0004
Create Date: 2026-12-01

``enqueued_at`` is when harel_sa's publish committed the message (NULL for rows other programs
wrote, such as the harel engine's own transport): the age of the oldest message, whatever its
event says. The routing-key index becomes partial (``routing_key IS NOT NULL``): a claim with
routing keys only ever walks groups that have one, and a claim of a group without one (the
common case, and every group harel's own transport makes) no longer writes that index.

Frozen: this file spells its own SQL and guards (SQLite's and PostgreSQL's) and imports nothing
from harel_sa, so it does the same in every release; tests/migrations/golden/ holds its
``upgrade --sql`` output on each dialect.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from alembic import context, op
from alembic.util import CommandError

revision: str = "harel_sa_0005"
down_revision: str | Sequence[str] | None = "harel_sa_0004"
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


def upgrade() -> None:
    p = _prefix()
    if _dialect() == "postgresql":
        op.execute(
            f"ALTER TABLE {p}_transport_messages "
            "ADD COLUMN IF NOT EXISTS enqueued_at DOUBLE PRECISION"
        )
    else:
        present = _columns(f"{p}_transport_messages")
        if present is None or "enqueued_at" not in present:
            op.execute(f"ALTER TABLE {p}_transport_messages ADD COLUMN enqueued_at REAL")
    op.execute(f"DROP INDEX IF EXISTS {p}_transport_groups_by_routing_key")
    op.execute(
        f"CREATE INDEX IF NOT EXISTS {p}_transport_groups_by_routing_key "
        f"ON {p}_transport_groups (routing_key, last_claimed_at) WHERE routing_key IS NOT NULL"
    )


def downgrade() -> None:
    # Only timestamps go (the older schema has no place for them); every row stays.
    p = _prefix()
    _refuse_a_bare_step_across_heads()
    op.execute(f"DROP INDEX IF EXISTS {p}_transport_groups_by_routing_key")
    op.execute(
        f"CREATE INDEX IF NOT EXISTS {p}_transport_groups_by_routing_key "
        f"ON {p}_transport_groups (routing_key, last_claimed_at)"
    )
    if _dialect() == "postgresql":
        op.execute(f"ALTER TABLE {p}_transport_messages DROP COLUMN IF EXISTS enqueued_at")
        return
    present = _columns(f"{p}_transport_messages")
    if present is None or "enqueued_at" in present:
        op.execute(f"ALTER TABLE {p}_transport_messages DROP COLUMN enqueued_at")

"""PostgreSQL: flat claims with a priority floor or routing keys.

Revision ID: harel_sa_0006
Revises: harel_sa_0005
Create Date: 2026-12-01

A PostgreSQL claim with a priority floor walked ``groups_by_priority`` and sorted every group at
or above the floor (or walked the main index past every group below it); one with routing keys
sorted every group of its keys: the cost grew with those groups. PostgreSQL cannot merge one
walk per priority level under ``FOR UPDATE``, so each floor gets its own partial index in the
round-robin order, ``(last_claimed_at, arrival) WHERE priority >= n`` for n = 1..4 (the
priority-0 group, the common one, is in none), and ``groups_by_priority`` goes; the routing-key
index gains ``arrival``, so a key's groups are walked in round-robin order without a sort.

SQLite: nothing. Its index entries end with the rowid (the arrival order), and its claim
already walks one lane per priority level or key; this revision is a no-op there.

Frozen: this file spells its own SQL and guards (SQLite's and PostgreSQL's) and imports nothing
from harel_sa, so it does the same in every release; tests/migrations/golden/ holds its
``upgrade --sql`` output on each dialect.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from alembic import context, op
from alembic.util import CommandError

revision: str = "harel_sa_0006"
down_revision: str | Sequence[str] | None = "harel_sa_0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The priority floors a claim may have (1 to the highest priority, 4).
FLOORS = (1, 2, 3, 4)


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
    if _dialect() != "postgresql":
        return
    p = _prefix()
    for floor in FLOORS:
        op.execute(
            f"CREATE INDEX IF NOT EXISTS {p}_transport_groups_by_floor{floor} "
            f"ON {p}_transport_groups (last_claimed_at, arrival) WHERE priority >= {floor}"
        )
    op.execute(f"DROP INDEX IF EXISTS {p}_transport_groups_by_priority")
    op.execute(f"DROP INDEX IF EXISTS {p}_transport_groups_by_routing_key")
    op.execute(
        f"CREATE INDEX IF NOT EXISTS {p}_transport_groups_by_routing_key "
        f"ON {p}_transport_groups (routing_key, last_claimed_at, arrival) "
        "WHERE routing_key IS NOT NULL"
    )


def downgrade() -> None:
    # Indexes only: every row stays.
    p = _prefix()
    _refuse_a_bare_step_across_heads()
    if _dialect() != "postgresql":
        return
    op.execute(f"DROP INDEX IF EXISTS {p}_transport_groups_by_routing_key")
    op.execute(
        f"CREATE INDEX IF NOT EXISTS {p}_transport_groups_by_routing_key "
        f"ON {p}_transport_groups (routing_key, last_claimed_at) WHERE routing_key IS NOT NULL"
    )
    op.execute(
        f"CREATE INDEX IF NOT EXISTS {p}_transport_groups_by_priority "
        f"ON {p}_transport_groups (priority, last_claimed_at) WHERE priority > 0"
    )
    for floor in FLOORS:
        op.execute(f"DROP INDEX IF EXISTS {p}_transport_groups_by_floor{floor}")

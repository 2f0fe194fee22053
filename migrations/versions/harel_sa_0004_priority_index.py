"""Claims with a priority floor walk their own index: (priority, last_claimed_at).

Revision ID: harel_sa_0004
Revises: harel_sa_0003
Create Date: 2026-11-29

A claim with min_priority > 0 walks this index, one lane per priority level, instead of stepping
over every lower group on groups_by_last_claimed. Partial (priority > 0): the groups a floor
never wants, and the most common ones, cost no index write when they are claimed.

Frozen: this file spells its own SQL and guards (SQLite's and PostgreSQL's) and imports nothing
from harel_sa, so it does the same in every release; tests/migrations/golden/ holds its
``upgrade --sql`` output on each dialect.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from alembic import context, op
from alembic.util import CommandError

revision: str = "harel_sa_0004"
down_revision: str | Sequence[str] | None = "harel_sa_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


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
    p = _prefix()
    op.execute(
        f"CREATE INDEX IF NOT EXISTS {p}_transport_groups_by_priority "
        f"ON {p}_transport_groups (priority, last_claimed_at) WHERE priority > 0"
    )


def downgrade() -> None:
    p = _prefix()
    _refuse_a_bare_step_across_heads()
    op.execute(f"DROP INDEX IF EXISTS {p}_transport_groups_by_priority")

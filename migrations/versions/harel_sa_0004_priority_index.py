"""Claims with a priority floor walk their own index: (priority, last_claimed_at).

Revision ID: harel_sa_0004
Revises: harel_sa_0003
Create Date: 2026-11-29

A claim with min_priority > 0 walks this index, one lane per priority level, instead of stepping
over every lower group on groups_by_last_claimed. Partial (priority > 0): the groups a floor
never wants, and the most common ones, cost no index write when they are claimed.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from harel_sa.migrations import revision_names

revision: str = "harel_sa_0004"
down_revision: str | Sequence[str] | None = "harel_sa_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    names = revision_names()
    op.create_index(
        names.groups_by_priority,
        names.groups,
        ["priority", "last_claimed_at"],
        sqlite_where=sa.text("priority > 0"),
        if_not_exists=True,
    )


def downgrade() -> None:
    names = revision_names()
    op.drop_index(names.groups_by_priority, table_name=names.groups, if_exists=True)

"""Claims that do not walk: an index over leased rows, and one by priority.

Revision ID: harel_sa_0004
Revises: harel_sa_0003
Create Date: 2026-11-29

The claim's in-flight probe (locked_by IS NOT NULL AND lock_expiry >= now) read every message of
a group through (group_id, seq); the partial index holds only leased and parked rows. A claim
with a priority floor walks (priority, last_claimed_at) instead of skipping lower groups.
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
        names.messages_leased,
        names.messages,
        ["group_id", "lock_expiry"],
        sqlite_where=sa.text("locked_by IS NOT NULL"),
        if_not_exists=True,
    )
    op.create_index(
        names.groups_by_priority,
        names.groups,
        ["priority", "last_claimed_at"],
        if_not_exists=True,
    )


def downgrade() -> None:
    names = revision_names()
    op.drop_index(names.groups_by_priority, table_name=names.groups, if_exists=True)
    op.drop_index(names.messages_leased, table_name=names.messages, if_exists=True)

"""Dead letters: messages.deliveries and the dead table.

Revision ID: harel_sa_0003
Revises: harel_sa_0002
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from harel_sa import steps
from harel_sa.migrations import OpRunner, revision_names

revision: str = "harel_sa_0003"
down_revision: str | Sequence[str] | None = "harel_sa_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    names = revision_names()
    steps.add_deliveries(OpRunner(), names)
    op.create_table(
        names.dead,
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("group_id", sa.Text, nullable=False),
        sa.Column("event", sa.Text, nullable=False),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column("dead_at", sa.REAL, nullable=False),
        sa.Column("deliveries", sa.Integer, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("routing_key", sa.Text),
        if_not_exists=True,
    )
    op.create_index(names.dead_by_group, names.dead, ["group_id", "seq"], if_not_exists=True)


def downgrade() -> None:
    names = revision_names()
    op.drop_index(names.dead_by_group, table_name=names.dead, if_exists=True)
    op.drop_table(names.dead, if_exists=True)
    steps.drop_deliveries(OpRunner(), names)

"""The queue as the original stdlib transport made it (schema 3, before routing_key).

Revision ID: harel_sa_0001
Revises:
Create Date: 2026-11-29

Adopts a file that already holds these tables (IF NOT EXISTS), and gives every message whose
group row is missing one, so it can be claimed. Frozen: the DDL is spelled here.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from harel_sa import steps
from harel_sa.migrations import OpRunner, revision_names

revision: str = "harel_sa_0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = ("harel_sa",)
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    names = revision_names()
    op.create_table(
        names.messages,
        sa.Column("seq", sa.Integer, primary_key=True, nullable=True),
        sa.Column("group_id", sa.Text, nullable=False),
        sa.Column("event", sa.Text, nullable=False),
        sa.Column("locked_by", sa.Text),
        sa.Column("lock_expiry", sa.REAL),
        sqlite_autoincrement=True,
        if_not_exists=True,
    )
    op.create_table(
        names.groups,
        sa.Column("group_id", sa.Text, primary_key=True, nullable=True),
        sa.Column("last_claimed_at", sa.REAL, nullable=False, server_default=sa.text("0.0")),
        sa.Column("priority", sa.Integer, nullable=False, server_default=sa.text("0")),
        if_not_exists=True,
    )
    op.create_index(
        names.groups_by_last_claimed, names.groups, ["last_claimed_at"], if_not_exists=True
    )
    op.create_index(
        names.messages_by_group, names.messages, ["group_id", "seq"], if_not_exists=True
    )
    steps.adopt_orphans(OpRunner(), names)


def downgrade() -> None:
    names = revision_names()
    op.drop_index(names.messages_by_group, table_name=names.messages, if_exists=True)
    op.drop_index(names.groups_by_last_claimed, table_name=names.groups, if_exists=True)
    op.drop_table(names.groups, if_exists=True)
    op.drop_table(names.messages, if_exists=True)

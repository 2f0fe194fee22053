"""Routing by machine: groups.routing_key and its index (schema 4).

Revision ID: harel_sa_0002
Revises: harel_sa_0001
Create Date: 2026-11-29

The same step the transport's start-up runs (harel_sa.steps.add_routing_key): it looks at
PRAGMA table_info first, so a file that already has the column is left as it is.
"""

from __future__ import annotations

from collections.abc import Sequence

from harel_sa import steps
from harel_sa.migrations import OpRunner, revision_names

revision: str = "harel_sa_0002"
down_revision: str | Sequence[str] | None = "harel_sa_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    steps.add_routing_key(OpRunner(), revision_names())


def downgrade() -> None:
    steps.drop_routing_key(OpRunner(), revision_names())

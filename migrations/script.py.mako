"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}

Frozen once released: spell the DDL here (or call a step in harel_sa.steps), never build it from
the live metadata.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
${imports if imports else ""}
from harel_sa.migrations import revision_names

revision: str = ${repr(up_revision)}
down_revision: str | Sequence[str] | None = ${repr(down_revision)}
branch_labels: str | Sequence[str] | None = ${repr(branch_labels)}
depends_on: str | Sequence[str] | None = ${repr(depends_on)}


def upgrade() -> None:
    names = revision_names()
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    names = revision_names()
    ${downgrades if downgrades else "pass"}

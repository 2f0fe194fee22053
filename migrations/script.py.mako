"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}

Frozen once released: spell the SQL and its guards here, with ``op`` and its connection, and
import nothing from harel_sa (copy ``_prefix`` and the downgrade guards from the last revision).
Add the same statements to harel_sa/frozen.py and the golden files to tests/migrations/golden/.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from alembic import context, op
from alembic.util import CommandError
${imports if imports else ""}
revision: str = ${repr(up_revision)}
down_revision: str | Sequence[str] | None = ${repr(down_revision)}
branch_labels: str | Sequence[str] | None = ${repr(branch_labels)}
depends_on: str | Sequence[str] | None = ${repr(depends_on)}


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}

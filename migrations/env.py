"""harel_sa's Alembic environment: the logic lives in ``harel_sa.migrations.run_env``."""

from harel_sa.migrations import run_env

run_env()

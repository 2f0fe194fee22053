"""harel_sa's Alembic environment: the logic lives in ``harel_sa.alembic_env.run_env``."""

from harel_sa.alembic_env import run_env

run_env()

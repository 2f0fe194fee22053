"""pytest-alembic's fixtures: harel_sa's own history on a SQLite file of the test's own.

``alembic_engine`` is harel_sa's migration engine (``BEGIN IMMEDIATE``, transactional DDL);
``env.py`` runs on it through ``Config.attributes["connection"]``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic.config import Config
from sqlalchemy import Engine

from harel_sa import migrations as mig


@pytest.fixture
def alembic_db(tmp_path: Path) -> Path:
    return tmp_path / "pytest_alembic.db"


@pytest.fixture
def alembic_config(alembic_db: Path) -> Config:
    return mig.config(alembic_db)


@pytest.fixture
def alembic_engine(alembic_db: Path) -> Iterator[Engine]:
    engine = mig.engine_for(f"sqlite:///{alembic_db}")
    try:
        yield engine
    finally:
        engine.dispose()

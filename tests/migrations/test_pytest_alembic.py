"""The four standard migration checks, pytest-alembic's own: one head, upgrade from base to
head, the metadata matches the DDL the revisions build, every downgrade undoes its upgrade.

pytest-alembic 0.13.1 crashes at collection under pytest 9 when it inserts its tests itself,
so ``pytest_alembic_tests_path`` points at a file that does not exist and the tests are
imported here. Fixtures: ``conftest.py``.
"""

from __future__ import annotations

from pytest_alembic.tests import (
    test_model_definitions_match_ddl,
    test_single_head_revision,
    test_up_down_consistency,
    test_upgrade,
)

__all__ = [
    "test_model_definitions_match_ddl",
    "test_single_head_revision",
    "test_up_down_consistency",
    "test_upgrade",
]

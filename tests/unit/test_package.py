"""The package's face: every public name resolves to the object its module defines, and a
program that needs only the schema (a host's Alembic environment, ``harel-sa db``) imports
no more than that."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import harel_sa
from tests.cli.conftest import ROOT

#: What a program on the schema alone must not pay for.
HEAVY = ("pydantic", "asyncio", "aiosqlite", "psycopg", "harel_sa.worker", "harel_sa.events")


def loaded_after(statement: str) -> list[str]:
    """The modules of ``HEAVY`` a fresh interpreter holds after ``statement``."""
    probe = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True
    )
    modules = set(json.loads(done.stdout))
    return [name for name in HEAVY if name in modules]


def test_the_schema_alone_imports_no_events_workers_or_drivers() -> None:
    floor = loaded_after("import sqlalchemy")  # SQLAlchemy imports asyncio itself
    assert "pydantic" not in floor and "harel_sa.events" not in floor
    assert loaded_after("import harel_sa.schema") == floor
    assert loaded_after("from harel_sa import HEAD_REVISION, Names, SchemaError, metadata") == floor


def test_alembic_environment_imports_no_events_workers_or_drivers() -> None:
    assert loaded_after("import harel_sa.alembic_env") == loaded_after("import alembic.context")


def test_a_name_is_imported_from_its_module_when_first_asked_for() -> None:
    assert loaded_after("import harel_sa") == []
    assert loaded_after("from harel_sa import Worker")[-2:] == [
        "harel_sa.worker",
        "harel_sa.events",
    ]


@pytest.mark.parametrize("name", sorted(set(harel_sa.__all__) - {"__version__"}))
def test_every_public_name_is_its_modules_own(name: str) -> None:
    value = getattr(harel_sa, name)
    home = harel_sa._HOMES.get(name, "harel_sa.errors")
    assert value is getattr(importlib.import_module(home), name)
    assert name in dir(harel_sa)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Wroker'"):
        harel_sa.Wroker  # noqa: B018
    assert isinstance(harel_sa.__version__, str)

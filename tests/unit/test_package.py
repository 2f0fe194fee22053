"""The package's face: every public name resolves to the object its module defines, and a
program that needs only the schema (a host's Alembic environment, its models declared beside
harel_sa's tables) imports no more than that."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from types import ModuleType

import pytest

import harel_sa
import harel_sa.worker
from tests.cli.conftest import ROOT

#: What a program on the schema alone must not pay for.
HEAVY = ("pydantic", "asyncio", "aiosqlite", "psycopg", "harel_sa.worker", "harel_sa.events")
#: The worker's machinery, which only a running worker needs.
DRIVERS = (
    "harel_sa.worker.runstate",
    "harel_sa.worker.threads",
    "harel_sa.worker.tasks",
    "aiosqlite",
)


def loaded_after(statement: str, among: tuple[str, ...] = HEAVY) -> list[str]:
    """The modules of ``among`` a fresh interpreter holds after ``statement``."""
    probe = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True
    )
    modules = set(json.loads(done.stdout))
    return [name for name in among if name in modules]


def test_the_schema_alone_imports_no_events_workers_or_drivers() -> None:
    floor = loaded_after("import sqlalchemy")  # SQLAlchemy imports asyncio itself
    assert "pydantic" not in floor and "harel_sa.events" not in floor
    assert loaded_after("import harel_sa.schema") == floor
    assert loaded_after("from harel_sa import HEAD_REVISION, Names, SchemaError, metadata") == floor


def test_alembic_environment_imports_no_events_workers_or_drivers() -> None:
    assert loaded_after("import harel_sa.alembic_env") == loaded_after("import alembic.context")


def test_a_name_is_imported_from_its_module_when_first_asked_for() -> None:
    assert loaded_after("import harel_sa") == []
    assert {"harel_sa.worker", "harel_sa.events"} <= set(
        loaded_after("from harel_sa import Worker")
    )


def test_the_command_and_the_workers_options_load_no_worker_machinery() -> None:
    assert loaded_after("import harel_sa.cli", DRIVERS) == []
    assert loaded_after("from harel_sa.worker import Retry, DEFAULT_ACK_WAIT", DRIVERS) == []
    loaded = set(loaded_after("from harel_sa.worker import Worker", DRIVERS))
    assert {"harel_sa.worker.runstate", "harel_sa.worker.threads"} <= loaded


@pytest.mark.parametrize(
    ("package", "name"),
    [(harel_sa, n) for n in sorted(set(harel_sa.__all__) - {"__version__"})]
    + [(harel_sa.worker, n) for n in sorted(harel_sa.worker.__all__)],
)
def test_every_public_name_is_its_modules_own(package: ModuleType, name: str) -> None:
    home = package._HOMES.get(name, "harel_sa.errors")  # the package's errors are eager
    assert getattr(package, name) is getattr(importlib.import_module(home), name)
    assert name in dir(package)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'harel_sa' has no attribute 'Wroker'"):
        harel_sa.Wroker  # noqa: B018
    with pytest.raises(AttributeError, match=r"module 'harel_sa\.worker' has no attribute 'Wrk'"):
        harel_sa.worker.Wrk  # noqa: B018
    assert isinstance(harel_sa.__version__, str)

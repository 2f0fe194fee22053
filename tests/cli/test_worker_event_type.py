"""``harel-sa worker`` with the application's own event model (``--event-type``), a handler
that cannot take a lease, and the warning a claim logs when it dead-letters what it cannot
decode: real processes on a real file, as a new user runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from harel_sa import SqliteTransport, migrations
from tests.cli.conftest import ROOT, one_line_error

HANG = 60.0  # guards against a hang, never a timing assertion

MODELS = """
from pydantic import BaseModel


class Paid(BaseModel):
    order: str
    amount: int


def handle(lease):
    print("paid", lease.event.order, lease.event.amount, flush=True)


def no_lease():
    print("never", flush=True)


not_a_model = {"order": str}
"""


class Paid(BaseModel):  # the same model, for the test's own publish
    order: str
    amount: int


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "models.py").write_text(MODELS)
    migrations.upgrade(str(tmp_path / "e.db"))
    with SqliteTransport(str(tmp_path / "e.db"), event_type=Paid) as q:
        q.publish("order-1", Paid(order="o-1", amount=10))
        q.publish("order-2", Paid(order="o-2", amount=20))
    return tmp_path


def worker(project: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "harel_sa", "worker", *args, "--db", "e.db", "--until-empty"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=HANG,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", **(env or {})},
    )


def left(project: Path) -> tuple[int, int]:
    with SqliteTransport(str(project / "e.db"), event_type=Paid) as q:
        stats = q.stats()
    return stats.messages, stats.dead


def test_the_worker_decodes_the_applications_own_model(project: Path) -> None:
    done = worker(project, "models:handle", "--event-type", "models:Paid")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["paid o-1 10", "paid o-2 20"]
    assert "succeeded=2" in done.stderr and "WARNING" not in done.stderr
    assert left(project) == (0, 0)


def test_the_model_may_come_from_the_environment(project: Path) -> None:
    done = worker(project, "models:handle", env={"HAREL_SA_EVENT_TYPE": "models:Paid"})
    assert done.returncode == 0 and "succeeded=2" in done.stderr, done.stderr


def test_without_it_each_message_dead_lettered_is_a_warning_naming_it(project: Path) -> None:
    done = worker(project, "models:handle")
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 2, done.stderr
    assert "claim dead-lettered seq 1 of group 'order-1': undecodable event" in warnings[0]
    assert "o-1" not in done.stderr  # the event's data stays in the dead table
    assert "claimed=0" in done.stderr and "dead_at_claim=2" in done.stderr  # the stopped line
    assert left(project) == (0, 2)


@pytest.mark.parametrize(
    ("event_type", "says"),
    [
        ("models:not_a_model", "--event-type models:not_a_model is a dict, not a pydantic model"),
        ("models:Nope", "models has no 'Nope'"),
        ("models", "must be given as MODULE:ATTR"),
    ],
)
def test_an_event_type_that_is_no_model_exits_2_before_claiming(
    project: Path, event_type: str, says: str
) -> None:
    done = worker(project, "models:handle", "--event-type", event_type)
    assert done.returncode == 2, done.stderr
    assert says in one_line_error(done)
    assert left(project) == (2, 0)


def test_a_handler_that_cannot_take_a_lease_exits_2_before_claiming(project: Path) -> None:
    done = worker(project, "models:no_lease", "--event-type", "models:Paid")
    assert done.returncode == 2, done.stderr
    assert "models:no_lease: handler no_lease() cannot take the lease" in one_line_error(done)
    assert "never" not in done.stdout
    assert left(project) == (2, 0)

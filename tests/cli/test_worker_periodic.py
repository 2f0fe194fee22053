"""``harel-sa worker MODULE:CALLABLE --periodic MODULE:ATTR``: the worker publishes the
schedules ATTR lists (the flag repeats; ``HAREL_SA_PERIODIC`` is comma-separated) and handles
their ticks; what is not a list of ``harel_sa.Periodic``, or two schedules of one name, is a
one-line usage error (exit 2)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from harel_sa import migrations
from tests.cli.conftest import one_line_error
from tests.cli.test_worker_command import Process, _run

APP = """
from harel_sa import Event, Periodic

def handle(lease):
    print("handled", lease.group_id, lease.event.kind, flush=True)

def stamped(at):
    return Event(kind="tick", data={"at": at.timestamp()})

SCHEDULES = [Periodic("beat", every=1, group_id="ticks", event=stamped)]
OTHER = [Periodic("other", every=3600, group_id="ticks", event=Event(kind="hourly"))]
ONE = SCHEDULES[0]
MIXED = [SCHEDULES[0], "beat"]
not_a_list = 42
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text(APP)
    migrations.upgrade(str(tmp_path / "queue.db"))
    return tmp_path


def test_the_worker_publishes_and_handles_its_ticks(project: Path) -> None:
    env = {"HAREL_SA_PERIODIC": "app:OTHER"}
    worker = Process(
        project, "app:handle", "--db", "queue.db", "--periodic", "app:SCHEDULES", env=env
    )
    try:
        worker.wait_for(r"periodic=beat$")  # the flag won over the variable
        worker.wait_for(r"^handled ticks tick$", worker.out)
    finally:
        assert worker.stop(signal.SIGTERM) == 0
    assert any("periodic beat: published the tick of" in line for line in worker.err)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--periodic", "app"], "must be given as MODULE:ATTR, not 'app'"),
        (["--periodic", "app:nosuch"], "app has no 'nosuch'"),
        (["--periodic", "app:not_a_list"], "app:not_a_list is a int, not a list of harel_sa"),
        (["--periodic", "app:MIXED"], "app:MIXED holds a str, not a harel_sa.Periodic"),
        (
            ["--periodic", "app:SCHEDULES", "--periodic", "app:ONE"],
            "two periodic schedules are named 'beat'",
        ),
    ],
)
def test_what_is_not_a_list_of_schedules_is_a_usage_error(
    project: Path, args: list[str], says: str
) -> None:
    done = _run(project, "app:handle", "--db", "queue.db", *args)
    assert done.returncode == 2, done.stderr
    assert says in one_line_error(done)


def test_the_variable_names_several(project: Path) -> None:
    env = {"HAREL_SA_PERIODIC": "app:SCHEDULES, app:OTHER", "HAREL_SA_DB": "queue.db"}
    done = _run(project, "app:handle", "--until-empty", env=env)
    assert done.returncode == 0, done.stderr
    assert "periodic=beat,other" in done.stderr

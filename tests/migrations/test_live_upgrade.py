"""A rolling deploy: the upgrade runs while the previous release's workers and producers run.

The previous release is a checkout of the commit before the newest revision that changes the
dialect (``git archive``, as an old install would run it), its processes started with that
checkout first on ``PYTHONPATH`` (:mod:`tests.migrations.rolling_body`); the upgrade is this
checkout's ``harel-sa db upgrade``. Nothing mocked: real processes, a real file, a real server.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import time
from collections import defaultdict
from io import BytesIO
from pathlib import Path

import pytest

from harel_sa import HEAD_REVISION
from harel_sa import migrations as mig
from tests.conftest import FakeClock
from tests.migrations.helpers import assert_rows_kept, snapshot, sqlite_master, version
from tests.migrations.starts import STARTS

REPO = Path(__file__).resolve().parents[2]
BODY = Path(__file__).with_name("rolling_body.py")
HAREL_SA = Path(sys.executable).with_name("harel-sa")
#: The newest revision each dialect's schema changes at (0006 is PostgreSQL's indexes only).
NEWEST = {
    "postgresql": "harel_sa_0010_group_concurrency.py",
    "sqlite": "harel_sa_0010_group_concurrency.py",
}
GROUPS, BACKLOG, WORKERS = 40, 2000, 3


def previous_release(revision_file: str, into: Path) -> Path:
    """harel_sa as it stood just before ``revision_file`` was added, unpacked under ``into``
    (while the revision is only in the work tree, not yet committed: the last commit's)."""
    path = f"migrations/versions/{revision_file}"
    if (REPO / path).exists() and git("ls-files", "--error-unmatch", path).returncode:
        release: str | None = "HEAD"
    else:
        added = git("log", "--diff-filter=A", "--format=%H", "--", path).stdout.split()
        release = f"{added[-1]}^" if added else None
    assert release, (
        f"the git history that added {revision_file} is not in {REPO}: this test needs a clone "
        "with history (not a shallow one)"
    )
    archive = subprocess.run(
        ["git", "archive", "--format=tar", release, "harel_sa"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)


def old(checkout: Path, *args: object, out: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    log = (out / f"{args[0]}-{args[-1]}.err").open("wb")
    return subprocess.Popen(
        [sys.executable, str(BODY), *map(str, args)], env=env, cwd=out, stderr=log
    )


def wait_for(condition, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def delivered(out: Path) -> list[tuple[str, int, float]]:
    rows = []
    for log in out.glob("w*.log"):
        for line in log.read_text().splitlines():
            group, n, at = line.split()
            rows.append((group, int(n), float(at)))
    return rows


#: A transport of this release opening the queue with ``create_schema=True``.
START_UP = """
import sys
from harel_sa import SqliteTransport
from harel_sa.postgres.transport import PostgresTransport

url = sys.argv[1]
if url.startswith("sqlite:///"):
    SqliteTransport(url.removeprefix("sqlite:///")).close()
else:
    PostgresTransport(url).close()
"""


def flask_host(url: str, at: str, into: Path) -> list[str]:
    """The docs' Flask-Migrate app on ``url``, its history holding harel_sa at ``at``; the
    command that upgrades it (``flask db upgrade heads``)."""
    from tests.migrations.test_flask_host import flask, project

    if url.startswith("postgresql://"):
        url = url.replace("postgresql://", "postgresql+psycopg://")
    into.mkdir()
    project(into, url)
    done = flask(into, url, "db", "upgrade", at)
    assert done.returncode == 0, done.stderr
    return [str(HAREL_SA.with_name("flask")), "--app", "app", "db", "upgrade", "heads"]


@pytest.mark.parametrize("how", ["harel-sa db upgrade", "start-up", "flask db upgrade heads"])
@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_the_previous_release_keeps_working_through_the_upgrade(
    dialect: str, how: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        request.getfixturevalue("pg_url")
        if dialect == "postgresql"
        else f"sqlite:///{tmp_path / 'queue.db'}"
    )
    checkout = previous_release(NEWEST[dialect], tmp_path / "previous")
    out = tmp_path / "run"
    out.mkdir()
    if how == "flask db upgrade heads":  # integrated: the host's history owns the schema
        number = int(NEWEST[dialect].split("_")[2])
        command = flask_host(url, f"harel_sa_{number - 1:04d}", tmp_path / "host")
        setup = old(checkout, "setup", url, out, GROUPS, BACKLOG, "exists", out=out)
    else:
        setup = old(checkout, "setup", url, out, GROUPS, BACKLOG, out=out)
        command = [str(HAREL_SA), "db", "upgrade", "--url", url]
        if how == "start-up":
            command = [sys.executable, "-c", START_UP, url]
    assert setup.wait(120) == 0, (out / f"setup-{BACKLOG}.err").read_text()
    before = mig.current(url)
    assert before and before != (HEAD_REVISION,)  # the previous release's head

    workers = [old(checkout, "worker", url, out, f"w{i}", out=out) for i in range(WORKERS)]
    producer = old(checkout, "producer", url, out, GROUPS, BACKLOG, out=out)
    wait_for(lambda: len(delivered(out)) >= 200)
    upgrade = subprocess.run(
        command,
        cwd=tmp_path / "host" if how.startswith("flask") else tmp_path,
        env={**os.environ, "DATABASE_URL": url.replace("postgresql://", "postgresql+psycopg://")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert upgrade.returncode == 0, upgrade.stderr
    assert mig.current(url) == (HEAD_REVISION,)
    during = len(delivered(out))
    time.sleep(1.0)  # the old release goes on at head
    (out / "stop").touch()
    assert producer.wait(120) == 0, (out / f"producer-{BACKLOG}.err").read_text()
    for i, w in enumerate(workers):
        assert w.wait(300) == 0, (out / f"worker-w{i}.err").read_text()

    published = BACKLOG + int((out / "produced").read_text())
    rows = delivered(out)
    assert len(delivered(out)) > during  # deliveries went on after the upgrade
    assert sorted((g, n) for g, n, _ in rows) == sorted(
        (f"g{n % GROUPS}", n) for n in range(published)
    )  # every message once: none lost, none twice
    by_group: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for group, n, at in rows:
        by_group[group].append((at, n))
    for group, seen in by_group.items():
        order = [n for _, n in sorted(seen)]
        assert order == sorted(order), group  # in group order
    assert mig.check(url)


#: Runs ``harel_sa.migrations.upgrade`` on argv[1]; at the first statement naming argv[2] (inside
#: the run's one transaction) it says so in argv[3] and waits there to be killed.
STALL_AT = """
import sys, time
from pathlib import Path
from sqlalchemy import event
from sqlalchemy.engine import Engine
from harel_sa import migrations

@event.listens_for(Engine, "before_cursor_execute")
def stall(conn, cursor, statement, parameters, context, executemany):
    if sys.argv[2] in statement:
        Path(sys.argv[3]).touch()
        time.sleep(600)

migrations.upgrade(sys.argv[1])
"""


def test_a_sqlite_upgrade_killed_midway_leaves_the_file_as_it_was_and_resumes(
    tmp_path: Path, clock: FakeClock
) -> None:
    """SIGKILLed inside its transaction (revision 0004's index, after 0001-0003 ran in it), the
    upgrade leaves the original transport's file exactly as it was; the next run finishes."""
    path, marker = tmp_path / "queue.db", tmp_path / "stalled"
    start = STARTS["stdlib3-orphans"](path, clock)
    schema, kept = sqlite_master(path), snapshot(path)
    stalled = subprocess.Popen(
        [sys.executable, "-c", STALL_AT, str(path), "groups_by_priority", str(marker)]
    )
    wait_for(marker.exists)
    stalled.send_signal(signal.SIGKILL)
    stalled.wait()
    assert sqlite_master(path) == schema and snapshot(path) == kept and version(path) == []

    again = subprocess.run([str(HAREL_SA), "db", "upgrade", "--db", str(path)], check=False)
    assert again.returncode == 0
    assert version(path) == [HEAD_REVISION] and mig.check(path)
    assert_rows_kept(path, kept, adopted=start.adopted)

"""The PostgreSQL server the tests run against (tests/pg_cluster.py, tests/pg_fixtures.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine

from tests import pg_cluster
from tests.pg_cluster import Cluster
from tests.pg_fixtures import REQUIRE_VARIABLE, _unavailable

ROOT = Path(__file__).resolve().parents[2]
_databases_seen: set[str] = set()


def _wait_until(what: str, done: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"still not {what} after {timeout} s")
        time.sleep(0.05)


@pytest.fixture
def own_cluster_only(pg_server: Cluster) -> None:
    """For tests of the throw-away cluster itself: not for a server named by HAREL_SA_PG_URL."""
    if pg_server.home is None:
        pytest.skip(f"{pg_cluster.URL_VARIABLE} names the server: no throw-away cluster here")


@pytest.fixture
def server_programs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """PostgreSQL's server programs, for tests that start clusters of their own."""
    folder = pg_cluster.bindir()
    if folder is None:
        _unavailable(pg_cluster.INSTALL_HINT)
    monkeypatch.delenv(pg_cluster.URL_VARIABLE, raising=False)
    yield folder


def test_server_answers_with_durable_commits(pg_server: Cluster) -> None:
    print(f"server: {pg_server.url}")  # read by test_the_session_stops_its_cluster_...
    with psycopg.connect(pg_server.url) as conn:
        version = conn.execute("SELECT current_setting('server_version_num')::int").fetchone()
        assert version is not None and version[0] >= 130000
        if pg_server.home is not None:  # the throw-away cluster: as pg_cluster says
            settings = dict(
                conn.execute(
                    "SELECT name, setting FROM pg_settings WHERE name IN "
                    "('fsync', 'synchronous_commit', 'listen_addresses')"
                ).fetchall()
            )
            assert settings == {"fsync": "on", "synchronous_commit": "on", "listen_addresses": ""}


@pytest.mark.parametrize("attempt", [1, 2])
def test_each_test_gets_a_fresh_empty_database(pg_url: str, attempt: int) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        name = conn.execute("SELECT current_database()").fetchone()
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        ).fetchone()
        assert tables == (0,)
        conn.execute("CREATE TABLE left_by_a_test (x int)")
    assert name is not None and name[0] not in _databases_seen
    _databases_seen.add(name[0])


def test_url_works_with_psycopg_and_sqlalchemy(pg_url: str) -> None:
    assert pg_url.startswith("postgresql://")
    with psycopg.connect(pg_url) as conn:
        conn.execute("CREATE TABLE t (x int)")
        conn.execute("INSERT INTO t VALUES (7)")
    engine = create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.begin() as conn:
            assert conn.execute(text("SELECT x FROM t")).scalar_one() == 7
            assert conn.dialect.driver == "psycopg"
    finally:
        engine.dispose()

    async def read() -> int:
        aengine = create_async_engine(pg_url.replace("postgresql://", "postgresql+psycopg://"))
        try:
            async with aengine.connect() as conn:
                return int((await conn.execute(text("SELECT x FROM t"))).scalar_one())
        finally:
            await aengine.dispose()

    import asyncio

    assert asyncio.run(read()) == 7


def test_dropping_a_database_closes_its_connections(pg_server: Cluster) -> None:
    url = pg_server.create_database()
    name = url.split("?")[0].rsplit("/", 1)[1]
    held = psycopg.connect(url)
    try:
        pg_server.drop_database(url)
        with psycopg.connect(pg_server.url) as conn:
            found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            assert found.fetchone() is None
        with pytest.raises(psycopg.OperationalError):
            held.execute("SELECT 1")
    finally:
        held.close()


def test_restart_closes_connections_and_keeps_data(
    pg_server: Cluster, pg_url: str, own_cluster_only: None
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (x int)")
        conn.execute("INSERT INTO kept VALUES (1)")
    before = psycopg.connect(pg_url, autocommit=True)
    try:
        pg_server.restart()
        with pytest.raises(psycopg.OperationalError):
            before.execute("SELECT 1")
    finally:
        before.close()
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT x FROM kept").fetchall() == [(1,)]


def test_a_cluster_that_does_not_start_says_why_and_leaves_nothing(
    server_programs: Path, tmp_path: Path
) -> None:
    before = set(Path("/tmp").glob("harel-sa-pg-*")) | set(
        Path(tempfile.gettempdir()).glob("harel-sa-pg-*")
    )
    with pytest.raises(pg_cluster.StartError) as caught:
        pg_cluster.start({"shared_buffers": "'bogus'"})
    message = str(caught.value)
    assert "pg_ctl start failed" in message
    assert 'invalid value for parameter "shared_buffers"' in message  # from the server's log
    home = Path(message.split("the server's log (")[1].split(")")[0]).parent
    assert home.name.startswith("harel-sa-pg-")
    assert not home.exists()
    assert home not in before


def test_the_cluster_goes_away_when_its_starter_is_killed(server_programs: Path) -> None:
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from tests import pg_cluster; c = pg_cluster.start(); "
            "print(c.home, flush=True); time.sleep(600)",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert starter.stdout is not None
        home = Path(starter.stdout.readline().strip())
        assert (home / "data" / "postmaster.pid").exists()
        pid = int((home / "data" / "postmaster.pid").read_text().split()[0])
    finally:
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait()
    _wait_until("removed", lambda: not home.exists())

    def postmaster_gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    _wait_until("stopped", postmaster_gone)


def _pytest(test: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """pytest run on ``test`` in a process of its own, with none of our HAREL_SA_ variables
    but ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("HAREL_SA_")}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",
            "-q",
            "-rs",
            *args,
            test,
        ],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


THIS = "tests/postgres/test_server.py"


def test_without_postgres_the_tests_skip_saying_what_to_install() -> None:
    run = _pytest(
        f"{THIS}::test_server_answers_with_durable_commits",
        {pg_cluster.BINDIR_VARIABLE: "/nonexistent"},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 skipped" in run.stdout
    assert "apt-get install postgresql-15" in run.stdout


def test_without_postgres_the_tests_fail_when_it_is_required() -> None:
    run = _pytest(
        f"{THIS}::test_server_answers_with_durable_commits",
        {pg_cluster.BINDIR_VARIABLE: "/nonexistent", REQUIRE_VARIABLE: "1"},
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 error" in run.stdout
    assert "skipped" not in run.stdout
    assert f"{REQUIRE_VARIABLE}=1 and no PostgreSQL server" in run.stdout


def test_the_session_stops_its_cluster_and_removes_it(server_programs: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="pgs-", dir="/tmp"))
    try:
        tmp.chmod(0o755)  # as root, the postgres user must reach the cluster's directory
        run = _pytest(
            f"{THIS}::test_server_answers_with_durable_commits",
            {"TMPDIR": str(tmp), REQUIRE_VARIABLE: "1"},
            "-s",
        )
        assert run.returncode == 0, run.stdout + run.stderr
        assert "1 passed" in run.stdout
        assert f"server: postgresql://postgres@/postgres?host={tmp}/harel-sa-pg-" in run.stdout
        assert list(tmp.glob("harel-sa-pg-*")) == []
    finally:
        subprocess.run(["rm", "-rf", str(tmp)], check=False)

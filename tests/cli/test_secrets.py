"""A database password never reaches output: the same PostgreSQL database, its password given
in each form libpq takes (``user:pw@``, ``?password=``, ``?sslpassword=``; a ``key=value``
conninfo string, which harel_sa refuses), through every command and API that shows a
database: ``harel-sa db``'s lines, JSON and advice, ``harel-sa demo``, the worker's start-up
log, the transports' ``database`` and ``repr``, and their errors.

The throw-away cluster trusts its Unix socket, so the role's password is never checked: the
point is only that its text never appears."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from harel_sa import AsyncPostgresTransport, HarelSAError, PostgresTransport
from harel_sa.postgres.connect import display
from tests.checks import first_call
from tests.cli.conftest import ROOT, Cli, as_json
from tests.pg_cluster import Cluster

PASSWORD = "Zx9qSecretPw"
FORMS = ("userinfo", "password", "sslpassword")
HANG = 120.0  # guards against a hang, never a timing assertion
APP = "def handle(lease):\n    pass\n"
#: A server that is not there: connecting fails at once (no such socket).
NOWHERE = "/nonexistent/harel-sa-secrets"


@pytest.fixture
def role(pg_server: Cluster, pg_url: str) -> Iterator[str]:
    """A role with :data:`PASSWORD` that owns ``pg_url``'s database (dropped after it)."""
    name = f"harel_sa_secret_{os.getpid()}"
    database = urlsplit(pg_url).path.lstrip("/")
    pg_server.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{PASSWORD}'")
    try:
        pg_server.execute(f'ALTER DATABASE "{database}" OWNER TO {name}')
        yield name
    finally:
        pg_server.drop_database(pg_url)  # what the role owns goes first
        pg_server.execute(f"DROP ROLE {name}")


def with_password(url: str, role: str, form: str) -> str:
    """``url`` as ``role``, its password given in ``form``."""
    parts = urlsplit(url)
    where = parts.netloc.rpartition("@")[2]
    query = [q for q in parts.query.split("&") if q]
    if form == "userinfo":
        netloc = f"{role}:{PASSWORD}@{where}"
    elif form == "password":
        netloc, query = f"{role}@{where}", [*query, f"password={PASSWORD}"]
    else:  # libpq's password of the client's SSL key, beside the role's own
        netloc, query = f"{role}:{PASSWORD}@{where}", [*query, f"sslpassword={PASSWORD}"]
    return urlunsplit(("postgresql", netloc, parts.path, "&".join(query), ""))


def unreachable(url: str) -> str:
    """``url`` with its host a socket directory that does not exist."""
    parts = urlsplit(url)
    query = [q for q in parts.query.split("&") if q and not q.startswith("host=")]
    netloc = parts.netloc.rpartition("@")[0] + "@" if "@" in parts.netloc else ""
    query.append(f"host={NOWHERE}")
    return urlunsplit(("postgresql", netloc, parts.path, "&".join(query), ""))


def hidden(*texts: str) -> None:
    for text in texts:
        assert PASSWORD not in text, text


def shown(done: subprocess.CompletedProcess[str], *, code: int = 0) -> str:
    """stdout and stderr of ``done`` (which exited ``code``), checked free of the password."""
    hidden(done.stdout, done.stderr)
    assert done.returncode == code, done.stdout + done.stderr
    return done.stdout + done.stderr


def worker(tmp_path: Path, url: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "app.py").write_text(APP)
    return subprocess.run(
        [sys.executable, "-m", "harel_sa", "worker", "app:handle", "--url", url, "--until-empty"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=HANG,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


@pytest.mark.parametrize("form", FORMS)
def test_no_command_prints_the_password(
    cli: Cli, tmp_path: Path, pg_url: str, role: str, form: str
) -> None:
    url = with_password(pg_url, role, form)
    # No queue yet: every advice line names the database.
    assert "harel-sa db upgrade --url" in shown(cli("db", "current", "--url", url))
    assert "harel-sa db upgrade --url" in shown(cli("db", "check", "--url", url), code=1)
    assert as_json(cli("db", "check", "--url", url, "--json"))["problem"]
    hidden(cli("db", "check", "--url", url, "--json").stdout)
    assert "harel-sa db upgrade --url" in shown(worker(tmp_path, url), code=3)

    assert "upgraded" in shown(cli("db", "upgrade", "--url", url))
    shown(cli("db", "upgrade", "--url", url, "--json"))
    shown(cli("db", "current", "--url", url, "--json"))
    shown(cli("db", "check", "--url", url))
    assert " started " in shown(worker(tmp_path, url))  # its start-up log line

    small = ["--messages", "20", "--groups", "2", "--workers", "1", "--producers", "1"]
    demo = cli("demo", "--url", url, *small, "--concurrency", "1", "--json", "--no-progress")
    shown(demo)
    assert "***" in as_json(demo)["config"]["database"]
    assert "demo on " in shown(cli("demo", "--url", url, *small, "--no-progress"))

    nowhere = unreachable(url)  # "cannot connect" is exit 1 on every command
    assert "cannot connect to" in shown(cli("db", "check", "--url", nowhere), code=1)
    assert "cannot connect to" in shown(cli("db", "upgrade", "--url", nowhere), code=1)
    assert "cannot connect to" in shown(cli("db", "current", "--url", nowhere), code=1)
    assert "cannot connect to" in shown(cli("demo", "--url", nowhere, *small), code=1)
    assert "cannot connect to" in shown(worker(tmp_path, nowhere), code=1)


@pytest.mark.parametrize("form", FORMS)
def test_no_transport_shows_the_password(pg_url: str, role: str, form: str) -> None:
    url = with_password(pg_url, role, form)
    with pytest.raises(HarelSAError) as refused:  # no queue: the advice names the database
        first_call(PostgresTransport(url, create_schema=False))
    hidden(str(refused.value))
    with PostgresTransport(url) as q:
        hidden(q.database, repr(q))
        assert "***" in q.database

    async def run() -> None:
        q = await AsyncPostgresTransport.create(url)
        async with q:
            hidden(q.database, repr(q))
            assert "***" in q.database
        with pytest.raises(HarelSAError) as lost:
            await AsyncPostgresTransport.create(unreachable(url))
        hidden(str(lost.value))
        assert "cannot connect to" in str(lost.value)

    asyncio.run(run())
    with pytest.raises(HarelSAError) as lost:
        PostgresTransport(unreachable(url))
    hidden(str(lost.value))
    assert "cannot connect to" in str(lost.value)


def test_a_conninfo_string_is_refused_without_its_password(cli: Cli) -> None:
    info = f"host={NOWHERE} dbname=app user=app password={PASSWORD}"
    with pytest.raises(HarelSAError) as refused:
        PostgresTransport(info)
    hidden(str(refused.value))
    for command in (["db", "check"], ["db", "upgrade"], ["stats"]):
        done = cli(*command, "--url", info)
        assert "URL" in shown(done, code=2)


@pytest.mark.parametrize(
    "target",
    [
        f"postgresql://app:{PASSWORD}@host/db",
        f"postgresql+psycopg://app@host:5432/db?password={PASSWORD}",
        f"postgresql://app@/db?host=/tmp&PASSWORD={PASSWORD}",
        f"postgresql://app@/db?sslpassword={PASSWORD}&password={PASSWORD}",
        f"postgresql://app:{PASSWORD}@host:notaport/db",  # not parsed: masked as text
        f"host=h user=app password={PASSWORD} dbname=db",
        f"host=h password = '{PASSWORD} x\\' y' dbname=db",
        f"host=h sslpassword={PASSWORD}",
    ],
)
def test_display_masks_every_credential_form(target: str) -> None:
    assert PASSWORD not in display(target)
    assert "***" in display(target)


def test_display_leaves_sqlite_paths_and_urls_as_they_are() -> None:
    for target in ("q.db", "/var/lib/app/q.db", "sqlite:///q.db", "sqlite:////abs/q.db"):
        assert display(target) == target

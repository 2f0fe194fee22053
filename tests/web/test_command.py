"""``harel-sa web`` as run: its usage errors (exit 2, one line, before anything is served or
opened), a queue that is not at head (exit 3), the missing extra, the environment's
database, and what it prints: the address, never the token nor a database password."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from harel_sa.cli.web import redactor
from tests.cli.conftest import Cli, cli, one_line_error
from tests.cli.test_secrets import PASSWORD, with_password
from tests.web.conftest import ROOT, TOKEN, start

__all__ = ["cli"]  # a fixture


@pytest.fixture
def db(tmp_path: Path) -> str:
    from harel_sa import SqliteTransport

    path = str(tmp_path / "queue.db")
    SqliteTransport(path).close()
    return path


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["--allow-writes"], {}, "--allow-writes needs a token: set HAREL_SA_WEB_TOKEN"),
        (["--allow-writes"], {"HAREL_SA_WEB_TOKEN": "Qz7tiny"}, "the token is too short"),
        (["--allow-writes", "--token-file", "/nonexistent/t"], {}, "cannot read the token file"),
        (["--port", "70000"], {}, "--port must be from 0 to 65535"),
        (["--refresh", "-1"], {}, "--refresh must be 0"),
        (["--port", "x"], {}, "argument --port: invalid int value"),
    ],
)
def test_usage_errors(db: str, args: list[str], env: dict[str, str], said: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "harel_sa", "web", "--db", db, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done
    assert said in one_line_error(done)
    assert "Qz7tiny" not in done.stderr  # the token, even a bad one, is never printed


def test_no_database_or_not_a_queue(cli: Cli, tmp_path: Path) -> None:
    missing = one_line_error(done := cli("web", "--db", str(tmp_path / "none.db")))
    assert done.returncode == 2 and "no such database file" in missing
    assert cli("web", "--url", "mysql://x/y").returncode == 2
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    done = cli("web", "--db", str(other))
    assert done.returncode == 3, done
    assert "no harel_sa queue" in one_line_error(done)
    done = cli("web")
    assert done.returncode == 2 and "no database" in one_line_error(done)


def test_a_port_in_use_fails(cli: Cli, db: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = str(taken.getsockname()[1])
        done = cli("web", "--db", db, "--port", port)
    assert done.returncode == 1 and "cannot listen on 127.0.0.1:" in one_line_error(done)


def test_without_the_extra_it_says_which(db: str) -> None:
    block = "import sys; sys.modules['uvicorn'] = None; from harel_sa.cli import main; "
    done = subprocess.run(
        [sys.executable, "-c", block + f"sys.exit(main(['web', '--db', {db!r}]))"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 2, done
    assert "pip install 'harel-sa[web]'" in one_line_error(done)


def test_it_prints_its_address_and_never_the_token(db: str, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    server = start(["--db", db, "--allow-writes", "--token-file", str(token_file)])
    with urllib.request.urlopen(server.url) as page:
        html = page.read().decode()
    server.process.send_signal(signal.SIGINT)  # Ctrl-C
    out, err = server.process.communicate(timeout=30)
    assert server.process.returncode == 0, err
    assert server.url.startswith("http://127.0.0.1:")
    assert "writes allowed" in html
    for text in (server.said, out, err, html, server.url):
        assert TOKEN not in text


def test_the_database_from_the_environment(db: str) -> None:
    server = start([], {"HAREL_SA_URL": f"sqlite:///{db}"})
    with urllib.request.urlopen(server.url) as page:
        assert f"sqlite:///{db}" in page.read().decode()
    server.process.terminate()
    server.process.communicate(timeout=30)


@pytest.mark.parametrize("form", ["userinfo", "password", "sslpassword"])
def test_a_database_password_never_shows(pg_url: str, form: str) -> None:
    """The throw-away cluster trusts its socket: the password is given, never checked."""
    from harel_sa import PostgresTransport

    PostgresTransport(pg_url).close()
    role = urlsplit(pg_url).netloc.rpartition("@")[0] or "postgres"
    server = start(["--url", with_password(pg_url, role, form)])
    with urllib.request.urlopen(server.url) as page:
        html = page.read().decode()
    server.process.terminate()
    out, err = server.process.communicate(timeout=30)
    assert "Dead letters (0)" in html
    for text in (server.said, out, err, html):
        assert PASSWORD not in text
    assert "***" in server.said and "***" in html


def test_the_redactor_masks_every_form() -> None:
    pw = PASSWORD
    for url in (
        f"postgresql://app:{pw}@h/db",
        f"postgresql://app@h/db?password={pw}",
        f"postgresql://app@h/db?sslpassword={pw}",
    ):
        assert redactor(url)(f"failed: {pw} at {pw}") == "failed: *** at ***"
    assert redactor("queue.db")("as it is") == "as it is"

"""A Flask-Migrate app (Flask, Flask-SQLAlchemy and Flask-Migrate from PyPI) keeping harel_sa's
revisions in its own history, as docs/hosts.md sets it up (its ``app.py``, read from the
page), on SQLite and on a real PostgreSQL: ``flask db upgrade heads``, autogenerate empty, the
app publishes and a worker drains, the app's downgrade keeps the queue, ``harel-sa db check``
tells the truth; and the one ini mistake that would make the app's revisions vanish is refused.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harel_sa import Event, Names, SqliteTransport

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NAMES = Names()


def app_py() -> str:
    found = re.findall(
        r"<!-- file: app.py -->\n```python\n(.*?)\n```", (REPO / "docs/hosts.md").read_text(), re.S
    )
    assert len(found) == 1
    return str(found[0]) + "\n"


def flask(cwd: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "flask"), "--app", "app", *args],
        cwd=cwd,
        env={**os.environ, "DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=300,
    )


def harel_sa(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "harel-sa"), *args], capture_output=True, text=True)


def project(cwd: Path, url: str, versions: str = "%(here)s/versions") -> None:
    (cwd / "app.py").write_text(app_py())
    assert flask(cwd, url, "db", "init").returncode == 0
    ini = cwd / "migrations" / "alembic.ini"
    ini.write_text(
        ini.read_text().replace(
            "[alembic]\n",
            "[alembic]\npath_separator = space\n"
            f"version_locations = {versions} harel_sa.migrations:versions\n",
            1,
        )
    )


def tables(url: str) -> set[str]:
    from sqlalchemy import create_engine, inspect

    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def transport(url: str) -> object:
    if url.startswith("sqlite"):
        return SqliteTransport(url, create_schema=False)
    from harel_sa import PostgresTransport

    return PostgresTransport(url, create_schema=False)


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_a_flask_migrate_app_keeps_the_queue_in_its_own_history(
    dialect: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if dialect == "postgresql":
        url = request.getfixturevalue("pg_url").replace("postgresql://", "postgresql+psycopg://")
    else:
        url = f"sqlite:///{tmp_path / 'app.db'}"
    gate = ["--url", url]
    project(tmp_path, url)
    for step in (
        ("db", "upgrade", "heads"),
        ("db", "migrate", "-m", "orders", "--head", "base", "--branch-label", "app",
         "--version-path", "migrations/versions"),
        ("db", "upgrade", "heads"),
    ):  # fmt: skip
        done = flask(tmp_path, url, *step)
        assert done.returncode == 0, done.stderr
    assert {"order", "alembic_version", *NAMES.tables} <= tables(url)
    assert harel_sa("db", "check", *gate).returncode == 0
    assert NAMES.version_table not in tables(url)  # recorded in the app's alembic_version

    revisions = sorted((tmp_path / "migrations" / "versions").glob("*.py"))
    done = flask(tmp_path, url, "db", "migrate", "-m", "nothing", "--head", "app@head")
    assert done.returncode == 0 and "No changes in schema detected" in done.stderr, done.stderr
    assert sorted((tmp_path / "migrations" / "versions").glob("*.py")) == revisions

    with transport(url) as queue:  # type: ignore[attr-defined]
        for n in range(5):
            queue.publish(f"order-{n}", Event(kind="order.paid", data={"n": n}))
    done = flask(tmp_path, url, "db", "upgrade")  # `head`: two heads now
    assert done.returncode != 0 and "Multiple head revisions" in done.stderr
    done = flask(tmp_path, url, "db", "downgrade", "app@-1")
    assert done.returncode == 0, done.stderr
    assert "order" not in tables(url) and set(NAMES.tables) <= tables(url)
    assert harel_sa("db", "check", *gate).returncode == 0  # the queue is still at head
    with transport(url) as queue:  # type: ignore[attr-defined]
        drained = []
        while (lease := queue.claim("worker", 30.0)) is not None:
            drained.append(lease.event.data["n"])
            assert queue.ack(lease)
    assert sorted(drained) == list(range(5))


def test_a_version_location_that_names_no_folder_is_refused(tmp_path: Path) -> None:
    """``%(here)s/migrations/versions`` in Flask-Migrate's ini (which sits in migrations/):
    Alembic would skip it and run harel_sa's revisions alone, exit 0, no app tables. harel_sa's
    first revision refuses instead, and nothing is created."""
    url = f"sqlite:///{tmp_path / 'app.db'}"
    project(tmp_path, url, versions="%(here)s/migrations/versions")
    done = flask(tmp_path, url, "db", "upgrade", "heads")
    assert done.returncode != 0
    assert "which is no folder" in done.stderr and "%(here)s/versions" in done.stderr
    assert not set(NAMES.tables) & tables(url)

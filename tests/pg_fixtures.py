"""pytest fixtures for tests against a real PostgreSQL (imported by ``tests/conftest.py``).

``pg_server`` starts one server per test session (:mod:`tests.pg_cluster`: a throw-away cluster,
or the server of ``HAREL_SA_PG_URL``) and stops it at the end; ``pg_url`` is a fresh, empty
database on it for one test, as a ``postgresql://`` URL, dropped after the test.

When no server can be started (PostgreSQL or psycopg not installed), every test that asks for
one is skipped with a reason that says what to install; with ``HAREL_SA_REQUIRE_PG=1`` (CI) it
fails instead. A server that is installed but does not start is reported with its log, as a
skip or (with ``HAREL_SA_REQUIRE_PG=1``) a failure.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest

from tests import pg_cluster

REQUIRE_VARIABLE = "HAREL_SA_REQUIRE_PG"


class Server:
    """The session's PostgreSQL server: hands out fresh databases on it."""

    def __init__(self, cluster: pg_cluster.Cluster, psycopg: Any) -> None:
        self.cluster = cluster
        self.url = cluster.url  # its maintenance database, as a superuser (or the given user)
        self._psycopg = psycopg
        self._names = (f"harel_sa_test_{os.getpid()}_{n}" for n in itertools.count())

    def execute(self, sql: str) -> None:
        """Run one statement on the maintenance database, in autocommit (CREATE DATABASE)."""
        with self._psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql)

    def create_database(self) -> str:
        """A new empty database (a copy of ``template1``); its ``postgresql://`` URL."""
        name = next(self._names)
        self.execute(f'CREATE DATABASE "{name}"')
        return self.cluster.url_for(name)

    def drop_database(self, url: str) -> None:
        """Drop the database ``url`` names, closing any connection still open on it."""
        name = url.split("?", 1)[0].rsplit("/", 1)[1]
        self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get(REQUIRE_VARIABLE) == "1":
        pytest.fail(f"{REQUIRE_VARIABLE}=1 and no PostgreSQL server: {reason}", pytrace=False)
    pytest.skip(f"no PostgreSQL server: {reason}")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Server]:
    try:
        import psycopg
    except ImportError:
        _unavailable("psycopg is not installed: pip install 'harel-sa[postgres]'")
    try:
        cluster = pg_cluster.start()
    except (pg_cluster.Unavailable, pg_cluster.StartError) as exc:
        _unavailable(str(exc))
    try:
        server = Server(cluster, psycopg)
        try:
            server.execute("SELECT 1")
        except psycopg.Error as exc:
            _unavailable(f"the server at {cluster.url} does not answer: {exc}")
        yield server
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(pg_server: Server) -> Iterator[str]:
    """A fresh empty database for this test, as a ``postgresql://`` URL."""
    url = pg_server.create_database()
    yield url
    pg_server.drop_database(url)

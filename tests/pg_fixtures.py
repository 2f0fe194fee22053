"""pytest fixtures for tests against a real PostgreSQL (imported by ``tests/conftest.py``).

``pg_server`` starts one server per test session (:mod:`tests.pg_cluster`: a throw-away cluster,
or the server of ``HAREL_SA_PG_URL``) and stops it at the end; ``pg_url`` is a fresh, empty
database on it for one test, as a ``postgresql://`` URL, dropped after the test.
``transaction_pooler`` and ``session_pooler`` are a PgBouncer before that server
(:mod:`tests.pgbouncer`) in either pool mode, one per test session.

When no server can be started (PostgreSQL or psycopg not installed), every test that asks for
one is skipped with a reason that says what to install; with ``HAREL_SA_REQUIRE_PG=1`` (CI) it
fails instead (the same for PgBouncer). A server that is installed but does not start is
reported with its log, as a skip or (with ``HAREL_SA_REQUIRE_PG=1``) a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NoReturn

import pytest

from tests import pg_cluster, pgbouncer

REQUIRE_VARIABLE = "HAREL_SA_REQUIRE_PG"


def _unavailable(reason: str, what: str = "PostgreSQL server") -> NoReturn:
    if os.environ.get(REQUIRE_VARIABLE) == "1":
        pytest.fail(f"{REQUIRE_VARIABLE}=1 and no {what}: {reason}", pytrace=False)
    pytest.skip(f"no {what}: {reason}")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[pg_cluster.Cluster]:
    """The session's server (``.url``: its maintenance database as a superuser;
    ``.create_database()``); ``.home`` is None when ``HAREL_SA_PG_URL`` names it."""
    try:
        import psycopg
    except ImportError:
        _unavailable("psycopg is not installed: pip install 'harel-sa[postgres]'")
    try:
        cluster = pg_cluster.start()
    except (pg_cluster.Unavailable, pg_cluster.StartError) as exc:
        _unavailable(str(exc))
    try:
        try:
            cluster.execute("SELECT 1")
        except psycopg.Error as exc:
            _unavailable(f"the server at {cluster.url} does not answer: {exc}")
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(pg_server: pg_cluster.Cluster) -> Iterator[str]:
    """A fresh empty database for this test, as a ``postgresql://`` URL."""
    url = pg_server.create_database()
    yield url
    pg_server.drop_database(url)


def _pooler(server: pg_cluster.Cluster, mode: str) -> Iterator[pgbouncer.Bouncer]:
    try:
        bouncer = pgbouncer.start(server.url, mode)
    except pgbouncer.Unavailable as exc:
        _unavailable(str(exc), "PgBouncer")
    try:
        yield bouncer
    finally:
        bouncer.stop()


@pytest.fixture(scope="session")
def transaction_pooler(pg_server: pg_cluster.Cluster) -> Iterator[pgbouncer.Bouncer]:
    """A PgBouncer in ``pool_mode = transaction`` before the session's server."""
    yield from _pooler(pg_server, "transaction")


@pytest.fixture(scope="session")
def session_pooler(pg_server: pg_cluster.Cluster) -> Iterator[pgbouncer.Bouncer]:
    """A PgBouncer in ``pool_mode = session`` before the session's server."""
    yield from _pooler(pg_server, "session")

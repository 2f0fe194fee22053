"""Fixtures every test kind shares: a database file on disk, a clock the test moves, and a
PostgreSQL server with a fresh database per test (``pg_server``, ``pg_url``), and PgBouncer before
it (``transaction_pooler``, ``session_pooler``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pg_fixtures import pg_server, pg_url, session_pooler, transaction_pooler

# fixtures, found by pytest under these names
__all__ = ["pg_server", "pg_url", "session_pooler", "transaction_pooler"]


class FakeClock:
    """A clock for leases and parks: time moves only when the test says so."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", help="run the long crash rounds")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "queue.db")

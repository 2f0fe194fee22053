"""One line per outage of a transport's database (issue 59): psycopg's pool's records about
harel_sa's pools are held back, the first failed attempt logs harel_sa's WARNING (the database
as output shows it: no password), the next connection made an INFO; other pools' records pass."""

from __future__ import annotations

import logging

import pytest

from harel_sa.postgres import outages
from harel_sa.redact import display

POOL_LOG = logging.getLogger("psycopg.pool")


def test_an_outage_is_one_warning_and_one_line_when_back(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    where = display("postgresql://app:s3cret@db1:5432,db2:5432/shop")
    name = outages.watch("jobs", where)
    try:
        POOL_LOG.warning("discarding closed connection: <harel_sa.postgres.wire.Connection [BAD]>")
        for _ in range(5):
            POOL_LOG.warning("error connecting in %r: connection failed: refused", name)
        POOL_LOG.warning("error connecting in 'app-pool': connection failed: refused")
        outages.connected(name)
        outages.connected(name)  # no outage running: nothing
        POOL_LOG.warning("error connecting in %r: connection failed: again", name)
    finally:
        outages.forget(name)
    said = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert said[0] == (
        "harel_sa.postgres",
        "WARNING",
        f"{where} went away (connection failed: refused); connecting again as the pool can",
    )
    assert said[1] == ("psycopg.pool", "WARNING", "error connecting in 'app-pool': "
                       "connection failed: refused")  # fmt: skip
    assert said[2][:2] == ("harel_sa.postgres", "INFO") and " is back after " in said[2][2]
    assert said[3][2].endswith(
        "went away (connection failed: again); connecting again as the pool can"
    )
    assert len(said) == 4
    assert all("s3cret" not in text for _, _, text in said)


def test_a_forgotten_pools_records_pass_as_psycopg_says_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    name = outages.watch("jobs", "db")
    outages.forget(name)
    POOL_LOG.warning("error connecting in %r: boom", name)
    assert [r.name for r in caplog.records] == ["psycopg.pool"]

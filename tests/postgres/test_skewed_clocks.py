"""Hosts whose clocks disagree (issue 45, point 2): on PostgreSQL "now" is the server's, so a
host an hour fast cannot hold a crashed worker's 1 s lease (or a 1 s park) for an hour, and a
host an hour slow cannot write a lease that the others see as lapsed at once. Each host is a
process whose ``time.time`` runs an hour off, set before harel_sa is imported."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from harel_sa import Event, PostgresTransport

HOUR = 3600.0

#: A host whose clock is OFFSET seconds off: it claims, then acks nothing (it "crashes"), or
#: nacks with a delay, as ACTION says; prints what it claimed.
HOST = """
import sys, time
_real = time.time
time.time = lambda: _real() + float(sys.argv[2])
from harel_sa import PostgresTransport
q = PostgresTransport(sys.argv[1])
lease = q.claim("skewed", float(sys.argv[3]))
print(lease.group_id if lease else "none")
if lease is not None and sys.argv[4] == "park":
    assert q.nack(lease, delay=float(sys.argv[3]))
q.close()
"""


def host(url: str, offset: float, visibility: float, action: str = "crash") -> str:
    done = subprocess.run(
        [sys.executable, "-c", HOST, url, str(offset), str(visibility), action],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout.strip()


@pytest.mark.parametrize("action", ["crash", "park"])
def test_a_fast_hosts_short_lease_or_park_ends_on_time(pg_url: str, action: str) -> None:
    with PostgresTransport(pg_url) as q:
        q.publish("g", Event(kind="one"))
        assert host(pg_url, +HOUR, 1.0, action) == "g"
        assert q.claim("w", 30.0) is None  # still held: not yet a second
        time.sleep(1.5)
        lease = q.claim("w", 30.0)
        assert lease is not None and lease.group_id == "g"  # not an hour later


def test_a_slow_host_cannot_write_a_lease_that_has_already_lapsed(pg_url: str) -> None:
    with PostgresTransport(pg_url) as q:
        q.publish("g", Event(kind="one"))
        assert host(pg_url, -HOUR, 30.0) == "g"
        assert q.claim("w", 30.0) is None  # its 30 s lease holds
        assert host(pg_url, -HOUR, 30.0) == "none"  # and holds for the slow host too

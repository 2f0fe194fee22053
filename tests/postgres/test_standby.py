"""A standby's URL (issue 59): the reading commands read a replica; a writing command there
exits 1 naming the standby and what to use instead; a transport's write raises a typed error
that says so, and writes nothing."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from harel_sa import Event, PostgresTransport, ReadOnlyError
from tests import failover
from tests.pg_cluster import Cluster


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Cluster, Cluster]]:
    with failover.queue_pair(synchronous=True) as (primary, standby, _):
        with PostgresTransport(primary.url_for("queue")) as q:
            q.publish("g", Event(kind="one"))
        yield primary, standby


def harel_sa(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harel_sa", *args], capture_output=True, text=True, timeout=60
    )


def test_the_reading_commands_read_a_standby(servers: tuple[Cluster, Cluster]) -> None:
    _, standby = servers
    done = harel_sa("stats", "--url", standby.url_for("queue"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].split() == ["messages", "1"]
    assert harel_sa("peek", "--url", standby.url_for("queue")).returncode == 0


@pytest.mark.parametrize(
    "command",
    [["purge", "--group", "g", "--yes"], ["pause", "--group", "g"], ["release"]],
    ids=lambda c: c[0],
)
def test_a_writing_command_on_a_standby_exits_1_naming_it(
    servers: tuple[Cluster, Cluster], command: list[str]
) -> None:
    primary, standby = servers
    done = harel_sa(*command, "--url", standby.url_for("queue"))
    assert done.returncode == 1, (done.stdout, done.stderr)
    [line] = done.stderr.strip().splitlines()
    assert "is a standby (in recovery): writes go to the primary" in line, line
    assert "Traceback" not in done.stderr
    with PostgresTransport(primary.url_for("queue")) as q:
        assert q.stats().messages == 1 and q.paused() == []


def test_a_transports_write_on_a_standby_raises_a_typed_error(
    servers: tuple[Cluster, Cluster],
) -> None:
    primary, standby = servers
    started = time.monotonic()
    with PostgresTransport(standby.url_for("queue")) as q:
        with pytest.raises(ReadOnlyError, match=r"is a standby \(in recovery\)"):
            q.publish("g", Event(kind="two"))
        with pytest.raises(ReadOnlyError, match=r"is a standby \(in recovery\)"):
            q.claim("w", 30.0)
    assert time.monotonic() - started < 30  # an error, not a wait
    with PostgresTransport(primary.url_for("queue")) as q:
        assert q.stats().messages == 1

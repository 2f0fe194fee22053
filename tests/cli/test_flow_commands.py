"""``harel-sa pause``, ``resume`` and ``backoff`` as run, on both backends: what they say,
their JSON and exit codes, bad input refused before anything is written, and what ``stats``
and ``top`` then show."""

from __future__ import annotations

from pathlib import Path

import pytest

from harel_sa import Event
from tests.cli.conftest import Cli, as_json
from tests.cli.test_both_backends import BACKENDS, opened, where


@pytest.mark.parametrize("backend", BACKENDS)
def test_pause_resume_and_backoff_from_the_command_line(
    cli: Cli, tmp_path: Path, request: pytest.FixtureRequest, backend: str
) -> None:
    at = where(backend, tmp_path, request)
    with opened(backend, at) as q:
        q.publish("g", Event(kind="a"), routing_key="mail")
    said = cli("pause", *at, "--routing-key", "mail")
    assert (said.returncode, said.stdout) == (0, "paused routing key mail\n")
    again = cli("pause", *at, "--routing-key", "mail", "--json")
    assert as_json(again) == {"paused": True, "was_paused": True}
    assert cli("pause", *at, "--group", "tenant-9").stdout == "paused group tenant-9\n"
    off = cli("backoff", *at, "--no-routing-key", "--seconds", "60", "--json")
    assert off.returncode == 0 and as_json(off)["backoff_until"] > 0
    stats = cli("stats", *at).stdout
    assert "held back" in stats and "routing key mail" in stats and "group tenant-9" in stats
    assert "backoff  no routing key" in stats
    top = cli("top", *at, "--iterations", "1", "--plain").stdout
    assert "paused=routing_key_mail,group_tenant-9" in top and "backing_off=no_routing_key" in top
    with opened(backend, at) as q:
        assert q.claim("w", 30.0) is None
        assert {(p.routing_key, p.group_id) for p in q.paused()} == {
            ("mail", None),
            (None, "tenant-9"),
        }
    assert cli("resume", *at, "--routing-key", "mail").stdout == "resumed routing key mail\n"
    assert cli("resume", *at, "--routing-key", "mail").stdout == (
        "routing key mail was not paused\n"
    )
    with opened(backend, at) as q:
        lease = q.claim("w", 30.0)
        assert lease is not None and lease.group_id == "g"


@pytest.mark.parametrize(
    "args",
    [
        ["pause"],
        ["pause", "--routing-key", "k", "--group", "g"],
        ["pause", "--routing-key", ""],
        ["resume", "--no-routing-key", "--group", "g"],
        ["backoff", "--routing-key", "k"],
        ["backoff", "--routing-key", "k", "--seconds", "0"],
        ["backoff", "--routing-key", "k", "--seconds", "nan"],
        ["backoff", "--group", "g", "--seconds", "5"],
    ],
)
def test_bad_input_is_refused_and_writes_nothing(cli: Cli, tmp_path: Path, args: list[str]) -> None:
    db = str(tmp_path / "q.db")
    with opened("sqlite", ["--db", db]) as q:
        q.publish("g", Event(kind="a"))
    done = cli(args[0], "--db", db, *args[1:])
    assert done.returncode == 2, done.stdout + done.stderr
    with opened("sqlite", ["--db", db]) as q:
        assert q.paused() == [] and q.limits() == {}


def test_stats_says_when_the_next_scheduled_message_is_due(cli: Cli, tmp_path: Path) -> None:
    db = str(tmp_path / "q.db")
    with opened("sqlite", ["--db", db]) as q:
        q.publish("g", Event(kind="a"), delay=7200)
    text = cli("stats", "--db", db).stdout
    assert "scheduled     1" in text and "next due      in 1h59m" in text
    assert as_json(cli("stats", "--db", db, "--json"))["next_due"] is not None


def test_peek_says_how_many_it_leaves_out(cli: Cli, tmp_path: Path) -> None:
    db = str(tmp_path / "q.db")
    with opened("sqlite", ["--db", db]) as q:
        q.publish_many([(f"g{n}", Event(kind="a")) for n in range(5)])
        q.publish("later", Event(kind="b"), delay=60)
    lines = cli("peek", "--db", db, "--limit", "2").stdout.splitlines()
    assert len(lines) == 4 and lines[-1] == "… and 4 more (--limit N shows more)"
    assert "more" not in cli("peek", "--db", db, "--limit", "6").stdout
    assert len(as_json(cli("peek", "--db", db, "--limit", "2", "--json"))) == 2

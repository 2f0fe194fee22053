"""What the commands print, on the points users tripped over: a kind is never cut, events are
JSON objects in JSON, times are UTC with a zone, a multi-line error keeps its table whole and
``--full`` shows it with the event, counts read right, the progress bar's first frame."""

from __future__ import annotations

import io
import json
import re
import sqlite3

from harel_sa import Event, SqliteTransport
from harel_sa.cli.progress import ProgressBar
from harel_sa.present.format import age, plural, utc_time
from tests.cli.conftest import Cli, as_json

LONG_KIND = "order.created.in.the.eu.warehouse.after.a.long.checkout"


def test_peek_shows_a_long_kind_whole_and_json_holds_the_event_as_an_object(
    cli: Cli, db: str
) -> None:
    with SqliteTransport(db) as q:
        q.publish("g", Event(kind=LONG_KIND, data={"note": "x" * 200}))
    text = cli("peek", "--db", db).stdout
    assert LONG_KIND in text and "…" in text  # the data is shortened, never the kind
    [message] = as_json(cli("peek", "--db", db, "--json"))
    assert message["event"]["kind"] == LONG_KIND and message["event"]["data"]["note"] == "x" * 200
    assert message["lock_expiry"] is None


def test_dead_letters_in_utc_a_multi_line_error_and_full(cli: Cli, db: str) -> None:
    with SqliteTransport(db) as q:
        q.publish("g", Event(kind="job"))
        q.publish("h", Event(kind="job"))
        q.dead_letter(q.claim("w", 30.0), "first line\nsecond line\nthird")
    with sqlite3.connect(db) as raw:
        raw.execute("INSERT INTO harel_transport_messages (group_id, event) VALUES ('x', 'oops')")
        raw.execute("INSERT INTO harel_transport_groups (group_id) VALUES ('x')")
    with SqliteTransport(db) as q:
        assert q.claim("w", 30.0) is not None  # h's message
        assert q.claim("w", 30.0) is None  # x's row does not decode: buried
    text = cli("dead", "list", "--db", db).stdout.splitlines()
    assert len(text) == 3  # the header and one line per message: no line broken by the error
    assert "first line second line third" in text[1]
    assert re.search(r" \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ", text[1])
    full = cli("dead", "list", "--db", db, "--full").stdout
    assert "  error: first line\n         second line\n         third\n  event: {" in full
    assert "  event: oops" in full
    listed = as_json(cli("dead", "list", "--db", db, "--json"))
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", listed[0]["dead_at"])
    assert listed[0]["event"]["kind"] == "job"
    assert (listed[1]["event"], listed[1]["event_text"]) == (None, "oops")


def test_an_explicit_seq_that_names_nothing_changes_nothing_and_exits_1(cli: Cli, db: str) -> None:
    with SqliteTransport(db) as q:
        q.publish("g", Event(kind="job"))
        q.dead_letter(q.claim("w", 30.0), "no")
    for command in (["requeue"], ["purge", "--yes"]):
        done = cli("dead", *command, "--db", db, "--seq", "1", "--seq", "999")
        assert done.returncode == 1 and "no dead message with seq 999" in done.stderr
        with SqliteTransport(db) as q:
            assert [d.seq for d in q.dead()] == [1]  # the one that exists was not touched


def test_a_max_deliveries_reason_counts_right(db: str) -> None:
    with SqliteTransport(db) as q:
        q.publish("g", Event(kind="job"))
        q.nack(q.claim("w", 30.0, max_deliveries=1), 0.0)
        assert q.claim("w", 30.0, max_deliveries=1) is None
        assert q.dead()[0].error == "delivered 1 time (max 1)"


def test_the_progress_bars_first_frame_shows_no_rate() -> None:
    out = io.StringIO()
    bar = ProgressBar(100, label="x", enabled=True, stream=out)
    bar.update(41)
    assert "-/s" in out.getvalue() and not re.search(r"\d{5,}/s", out.getvalue())


def test_stats_json_times_are_iso_utc(cli: Cli, db: str) -> None:
    with SqliteTransport(db):
        pass
    stats = json.loads(cli("stats", "--db", db, "--json").stdout)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stats["now"])


def test_formats() -> None:
    assert utc_time(0) == "1970-01-01T00:00:00Z"
    assert utc_time(0.5, millis=True) == "1970-01-01T00:00:00.500Z"
    assert (plural(1, "message"), plural(2, "message")) == ("1 message", "2 messages")
    assert (age(None), age(5.25), age(125), age(7322)) == ("-", "5.2s", "2m05s", "2h02m")
    # A time no clock reaches (another program's park of 1e308 s) reads as itself.
    assert (age(1e308), age(2e9)) == ("1e+308s", "2e+09s")

"""The app through Starlette's test client, on a real SQLite file and a real PostgreSQL: what
the page shows (escaped), and the writes: refused without writes allowed, with a wrong token,
from another origin or Host (nothing changed), done with the token."""

from __future__ import annotations

import re
import warnings
from typing import Any

import pytest

with warnings.catch_warnings():  # Starlette 1.x would rather have httpx2; either works here
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from harel_sa import Event
from harel_sa.cli.common import Target
from harel_sa.cli.web import app_for, redactor
from harel_sa.redact import display
from harel_sa.web.app import create_app
from tests.cli.test_secrets import PASSWORD
from tests.web.conftest import (
    HOSTILE_DATA,
    HOSTILE_ERROR,
    HOSTILE_GROUP,
    HOSTILE_PARKED,
    TOKEN,
    Queue,
)

BASE = "http://127.0.0.1:8642"


def client(queue: Queue, *, writes: bool) -> TestClient:
    if queue.backend == "sqlite":
        t = Target(queue.where, queue.where, "harel")
    else:
        t = Target(queue.where, None, "harel", is_url=True)
    app = app_for(t, ("127.0.0.1", 8642), TOKEN if writes else None)
    return TestClient(app, base_url=BASE)


def state(queue: Queue) -> Any:
    with queue.open() as q:
        return q.stats().model_dump(exclude={"now", "oldest_age", "oldest_ready_age"})


def test_the_page_shows_the_queue_escaped(queue: Queue) -> None:
    page = client(queue, writes=False).get("/")
    assert page.status_code == 200
    html = page.text
    for row in ('<th>messages</th><td class="n">5</td>', '<th>dead</th><td class="n">2</td>'):
        assert row in html
    assert "orders-1042" in html and "billing-1" in html and "card declined" in html
    assert "1h03m" in html  # orders-1042's oldest, enqueued 63 minutes ago
    for hostile in (HOSTILE_GROUP, HOSTILE_PARKED, HOSTILE_ERROR, HOSTILE_DATA):
        assert hostile not in html
    assert "&lt;script&gt;window.pwned=1&lt;/script&gt;" in html
    assert "&#34;&gt;&lt;img src=x onerror=&#34;window.pwned=2&#34;&gt;" in html
    assert "<script" not in html and "<img" not in html
    assert "script-src" not in page.headers["content-security-policy"]  # none may run
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert "/confirm" not in html  # read-only: no action offered


def test_writes_are_refused_without_allow_writes(queue: Queue) -> None:
    before = state(queue)
    c = client(queue, writes=False)
    assert c.get("/confirm", params={"action": "requeue"}).status_code == 403
    done = c.post("/action", data={"action": "requeue", "token": TOKEN})
    assert done.status_code == 403 and "writes are off" in done.text
    assert state(queue) == before


@pytest.mark.parametrize("token", [None, "", "wrong-token-wrong-token-wrong!!", TOKEN + "x"])
def test_a_wrong_token_changes_nothing(queue: Queue, token: str | None) -> None:
    before = state(queue)
    form = {"action": "purge-dead"}
    if token is not None:
        form["token"] = token
    done = client(queue, writes=True).post("/action", data=form)
    assert done.status_code == 403 and "wrong token" in done.text
    assert TOKEN not in done.text
    assert state(queue) == before


def test_another_origin_or_host_is_refused(queue: Queue) -> None:
    before = state(queue)
    c = client(queue, writes=True)
    form = {"action": "purge-dead", "token": TOKEN}
    other = c.post("/action", data=form, headers={"Origin": "http://evil.example"})
    assert other.status_code == 403 and "cross-origin" in other.text
    rebound = c.post("/action", data=form, headers={"Host": "evil.example:8642"})
    assert rebound.status_code == 403
    assert c.get("/", headers={"Host": "evil.example"}).status_code == 403
    json = c.post("/action", content=b"{}", headers={"Content-Type": "application/json"})
    assert json.status_code == 415
    assert state(queue) == before


def test_the_confirmation_carries_the_action_but_not_the_token(queue: Queue) -> None:
    c = client(queue, writes=True)
    html = c.get("/").text
    assert f"/confirm?action=requeue&amp;seq={queue.dead_seq}" in html
    page = c.get("/confirm", params={"action": "purge-group", "group": HOSTILE_GROUP})
    assert page.status_code == 200
    assert HOSTILE_GROUP not in page.text and "&lt;script&gt;" in page.text
    assert 'type="password" name="token"' in page.text and TOKEN not in page.text
    letter = c.get("/confirm", params={"action": "requeue", "seq": queue.dead_seq}).text
    assert "&lt;script&gt;window.pwned=3&lt;/script&gt; refund" in letter
    assert c.get("/confirm", params={"action": "requeue", "seq": "999"}).status_code == 404
    assert c.get("/confirm", params={"action": "drop-table"}).status_code == 400
    assert c.get("/confirm", params={"action": "purge-group"}).status_code == 400


def test_each_action_with_the_token(queue: Queue) -> None:
    c = client(queue, writes=True)

    def act(**form: Any) -> str:
        done = c.post("/action", data={**form, "token": TOKEN})
        assert done.status_code == 200, done.text
        return done.text

    assert "requeued 1 dead message" in act(action="requeue", seq=queue.dead_seq)
    with queue.open() as q:
        assert [d.seq for d in q.dead()] != [queue.dead_seq] and len(q.dead()) == 1
        assert [m.group_id for m in q.peek(HOSTILE_GROUP)] == [HOSTILE_GROUP]
    missing = c.post("/action", data={"action": "requeue", "seq": "999", "token": TOKEN})
    assert missing.status_code == 404
    assert "released 1 parked message" in act(action="release", group=HOSTILE_PARKED)
    assert "purged 1 dead message" in act(action="purge-dead")
    said = act(action="purge-group", group="orders-1042")
    assert "purged 3 messages of group orders-1042" in said
    with queue.open() as q:
        s = q.stats()
        assert (s.dead, s.parked, s.messages) == (0, 0, 3)
        assert q.peek("orders-1042") == []


def test_an_error_is_shown_without_the_database_password() -> None:
    url = f"postgresql://app:{PASSWORD}@db.example/shop"

    def broken() -> Any:
        raise RuntimeError(f"could not connect to {url}")

    app = create_app(
        open_read=broken,
        open_write=broken,
        title=display(url),
        address=("127.0.0.1", 8642),
        token=TOKEN,
        redact=redactor(url),
    )
    page = TestClient(app, base_url=BASE).get("/")
    assert page.status_code == 500 and "could not connect" in page.text
    assert PASSWORD not in page.text and "app:***@db.example" in page.text
    form = {"action": "requeue", "token": TOKEN}
    done = TestClient(app, base_url=BASE).post("/action", data=form)
    assert done.status_code == 500 and PASSWORD not in done.text


def test_pause_and_resume_a_group_or_a_routing_key_with_the_token(queue: Queue) -> None:
    c = client(queue, writes=True)

    def act(**form: Any) -> str:
        done = c.post("/action", data={**form, "token": TOKEN})
        assert done.status_code == 200, done.text
        return done.text

    assert "nothing is paused or backing off" in c.get("/").text
    assert "group orders-1042: paused" in act(action="pause", group="orders-1042")
    assert "group orders-1042: was paused already" in act(action="pause", group="orders-1042")
    assert "the messages without a routing key: paused" in act(action="pause", key="")
    with queue.open() as q:
        assert {(p.group_id, p.routing_key) for p in q.paused()} == {
            ("orders-1042", None),
            (None, None),
        }
        q.backoff("mail", 60)
    html = c.get("/").text
    assert "paused: group orders-1042" in html and "backoff: routing key mail" in html
    assert "/confirm?action=resume&amp;group=orders-1042" in html
    assert "/confirm?action=resume&amp;key=" in html
    page = c.get("/confirm", params={"action": "resume", "key": ""})
    assert page.status_code == 200 and "paused now" in page.text
    assert c.get("/confirm", params={"action": "pause"}).status_code == 400  # neither
    both = {"action": "pause", "group": "g", "key": "k", "token": TOKEN}
    assert c.post("/action", data=both).status_code == 400
    assert "resumed" in act(action="resume", key="")
    assert "was not paused" in act(action="resume", key="")
    assert "group orders-1042: resumed" in act(action="resume", group="orders-1042")
    with queue.open() as q:
        assert q.paused() == []


def test_pausing_is_refused_without_writes_or_the_token(queue: Queue) -> None:
    before = state(queue)
    done = client(queue, writes=False).post("/action", data={"action": "pause", "key": ""})
    assert done.status_code == 403
    wrong = client(queue, writes=True).post(
        "/action", data={"action": "pause", "group": "orders-1042", "token": "x"}
    )
    assert wrong.status_code == 403
    assert state(queue) == before


def test_the_page_says_when_the_next_scheduled_message_is_due(queue: Queue) -> None:
    c = client(queue, writes=False)
    assert "next due" not in c.get("/").text  # nothing scheduled
    with queue.open() as q:
        q.publish("later-1", Event(kind="reminder"), delay=7200)
    html = c.get("/").text
    assert '<th>scheduled</th><td class="n">1</td>' in html
    assert '<th>next due</th><td class="n">in 1h59m</td>' in html


def test_a_groups_own_page_lists_its_messages_head_first(queue: Queue) -> None:
    c = client(queue, writes=False)
    assert '<a href="/group?id=orders-1042">orders-1042</a>' in c.get("/").text
    page = c.get("/group", params={"id": "orders-1042"})
    assert page.status_code == 200 and "script-src" not in page.headers["content-security-policy"]
    rows = re.findall(r'<tr id="message-(\d+)"><td class="n">\d+</td><td>(\w+)</td>', page.text)
    assert [state for _, state in rows] == ["leased", "ready", "ready"]  # the head leased
    assert "<td>billing-1</td>" in page.text
    assert [int(seq) for seq, _ in rows] == sorted(int(seq) for seq, _ in rows)
    assert "/confirm" not in page.text  # read-only: no action
    hostile = c.get("/group", params={"id": HOSTILE_GROUP}).text
    assert HOSTILE_GROUP not in hostile and "&lt;script&gt;" in hostile
    assert c.get("/group").status_code == 400
    assert "no messages" in c.get("/group", params={"id": "nobody"}).text


def test_a_groups_page_offers_its_actions_with_writes(queue: Queue) -> None:
    c = client(queue, writes=True)
    page = c.get("/group", params={"id": HOSTILE_PARKED}).text
    assert "action=release" in page and "action=pause" in page and "action=purge-group" in page
    assert (
        c.post(
            "/action", data={"action": "pause", "group": "orders-1042", "token": TOKEN}
        ).status_code
        == 200
    )
    page = c.get("/group", params={"id": "orders-1042"}).text
    assert "(paused)" in page and "action=resume" in page


def test_a_chart_of_the_last_minutes_from_the_second_reading_on(queue: Queue) -> None:
    c = client(queue, writes=False)
    assert "<svg" not in c.get("/").text  # one reading: nothing to draw yet
    html = c.get("/").text
    chart = re.search(r'<section id="chart">.*?</section>', html, re.S)
    assert chart is not None and "<script" not in html
    for series in ("backlog", "out"):
        points = re.search(rf'<polyline class="{series}" points="([^"]+)"', chart.group(0))
        assert points is not None and len(points.group(1).split()) == 2
    assert "backlog (ready), up to 2" in chart.group(0)

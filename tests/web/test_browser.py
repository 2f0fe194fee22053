"""``harel-sa web`` as a user meets it: a real server process on a real queue (SQLite and
PostgreSQL), loaded in headless Chromium. The page shows the queue's real state, hostile
values as text that never runs, and a requeue done in the page (confirmation and token) is
in the database after. With ``HAREL_SA_SCREENSHOTS=docs`` it writes docs/web*.png."""

from __future__ import annotations

from typing import Any

try:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # the browser fixture says what to install (or fails, in CI)
    By = WebDriverWait = None

from tests.web.browser import browser, screenshot
from tests.web.conftest import (
    HOSTILE_DATA,
    HOSTILE_ERROR,
    HOSTILE_GROUP,
    HOSTILE_PARKED,
    TOKEN,
    Queue,
)

__all__ = ["browser"]  # a fixture


def cell(driver: Any, label: str) -> str:
    row = driver.find_element(
        By.XPATH, f"//section[@id='totals']//tr[starts-with(th, '{label}')]/td"
    )
    return str(row.text)


def shown(driver: Any, element_id: str) -> str:
    """The text of ``element_id`` once the page that has it has loaded (after a submit)."""
    found = WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.ID, element_id))
    return str(found[0].text)


def nothing_ran(driver: Any) -> None:
    assert driver.execute_script("return window.pwned === undefined")
    assert driver.find_elements(By.TAG_NAME, "script") == []
    assert driver.find_elements(By.TAG_NAME, "img") == []


def test_the_page_shows_the_queue_and_a_requeue_reaches_the_database(
    queue: Queue, serve: Any, browser: Any
) -> None:
    server = serve([*queue.args, "--allow-writes"], {"HAREL_SA_WEB_TOKEN": TOKEN})
    browser.get(server.url)
    assert browser.title.startswith("harel-sa web:")
    assert (cell(browser, "messages"), cell(browser, "dead")) == ("5", "2")
    assert (cell(browser, "in flight"), cell(browser, "parked")) == ("2", "1")
    groups = browser.find_element(By.ID, "groups").text
    assert "orders-1042" in groups and HOSTILE_PARKED in groups
    assert "billing-1" in browser.find_element(By.ID, "workers").text
    dead = browser.find_element(By.ID, f"dead-{queue.dead_seq}")
    assert HOSTILE_GROUP in dead.text and HOSTILE_ERROR in dead.text
    dead.find_element(By.TAG_NAME, "summary").click()  # the event's JSON, unfolded
    assert HOSTILE_DATA in dead.text
    nothing_ran(browser)
    if queue.backend == "sqlite":
        browser.get(server.url)  # a second reading: the rates, and the chart drawn
        assert cell(browser, "out (last").endswith("/s")
        line = browser.find_element(By.CSS_SELECTOR, "#chart svg polyline.backlog")
        assert len(line.get_attribute("points").split()) == 2
        screenshot(browser, "web.png")
        browser.get(server.url)

    browser.find_element(By.ID, f"dead-{queue.dead_seq}").find_element(
        By.CLASS_NAME, "requeue"
    ).click()
    assert shown(browser, "heading") == "Requeue?"
    affected = browser.find_element(By.ID, "affected").text
    assert HOSTILE_GROUP in affected and HOSTILE_ERROR in affected
    assert HOSTILE_GROUP not in browser.page_source  # in the form, escaped
    browser.find_element(By.ID, "token").send_keys("not-the-token-not-the-token-no")
    browser.find_element(By.ID, "confirm").click()
    assert "wrong token" in shown(browser, "message")
    with queue.open() as q:
        assert [d.seq for d in q.dead(HOSTILE_GROUP)] == [queue.dead_seq]

    browser.back()
    shown(browser, "token")
    token = browser.find_element(By.ID, "token")
    token.clear()
    token.send_keys(TOKEN)
    if queue.backend == "sqlite":
        screenshot(browser, "web-confirm.png")
    browser.find_element(By.ID, "confirm").click()
    assert shown(browser, "message") == "requeued 1 dead message"
    assert TOKEN not in browser.page_source and TOKEN not in browser.current_url
    with queue.open() as q:
        assert q.dead(HOSTILE_GROUP) == []
        back = q.peek(HOSTILE_GROUP)
        assert [(m.group_id, m.state) for m in back] == [(HOSTILE_GROUP, "ready")]

    browser.get(server.url)
    assert (cell(browser, "messages"), cell(browser, "dead")) == ("6", "1")
    assert HOSTILE_GROUP in browser.find_element(By.ID, "groups").text
    nothing_ran(browser)


def test_read_only_offers_no_action_and_refuses_one(queue: Queue, serve: Any, browser: Any) -> None:
    server = serve(queue.args)
    browser.get(server.url)
    assert "read-only" in browser.find_element(By.CLASS_NAME, "mode").text
    assert browser.find_elements(By.CLASS_NAME, "action") == []
    browser.get(server.url + "confirm?action=requeue")
    assert shown(browser, "heading") == "Read-only"
    nothing_ran(browser)


def test_a_group_paused_and_resumed_in_the_page(queue: Queue, serve: Any, browser: Any) -> None:
    server = serve([*queue.args, "--allow-writes"], {"HAREL_SA_WEB_TOKEN": TOKEN})
    browser.get(server.url)
    assert "nothing is paused" in browser.find_element(By.ID, "held").text
    browser.find_element(By.LINK_TEXT, "orders-1042").click()  # the group's own page
    group = shown(browser, "group")
    assert "Group orders-1042" in group and "leased" in group and "billing-1" in group
    if queue.backend == "sqlite":
        screenshot(browser, "web-group.png")
    browser.find_element(By.ID, "group").find_element(By.LINK_TEXT, "pause").click()
    assert shown(browser, "heading") == "Pause?"
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "confirm").click()
    assert shown(browser, "message") == "group orders-1042: paused"
    with queue.open() as q:
        assert [p.group_id for p in q.paused()] == ["orders-1042"]

    browser.get(server.url)
    held = browser.find_element(By.ID, "held")
    assert "paused: group orders-1042" in held.text
    held.find_element(By.LINK_TEXT, "resume").click()
    assert shown(browser, "heading") == "Resume?"
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "confirm").click()
    assert shown(browser, "message") == "group orders-1042: resumed"
    with queue.open() as q:
        assert q.paused() == []
    nothing_ran(browser)

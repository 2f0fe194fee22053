"""The guard alone: which ``Host`` values name the server, which requests its headers refuse,
and a token that never shows itself."""

from __future__ import annotations

from harel_sa.web.guard import Guard, Secret, authorities


def test_loopback_answers_to_every_loopback_name() -> None:
    assert authorities("127.0.0.1", 8642) == {"127.0.0.1:8642", "localhost:8642", "[::1]:8642"}
    assert authorities("::1", 80) == {"[::1]:80", "127.0.0.1:80", "localhost:80"}
    assert "0.0.0.0:9" in authorities("0.0.0.0", 9) and "localhost:9" in authorities("0.0.0.0", 9)


def test_another_address_answers_to_itself_and_the_names_given() -> None:
    assert authorities("10.1.2.3", 8642) == {"10.1.2.3:8642"}
    named = authorities("10.1.2.3", 8642, ["queue.example", "proxy.example:443"])
    assert named == {
        "10.1.2.3:8642",
        "queue.example",
        "queue.example:8642",
        "proxy.example:443",
    }


def test_the_headers_refused() -> None:
    guard = Guard(authorities("127.0.0.1", 8642), None)
    here = {"host": "127.0.0.1:8642"}
    assert guard.refusal("GET", here) is None
    assert guard.refusal("GET", {"host": "LOCALHOST:8642"}) is None
    assert guard.refusal("GET", {}) is not None
    assert guard.refusal("GET", {"host": "rebound.example:8642"}) is not None
    assert guard.refusal("POST", here) is None  # no Origin: not a browser's cross-site form
    assert guard.refusal("POST", {**here, "origin": "http://127.0.0.1:8642"}) is None
    for origin in ("null", "http://evil.example", "https://127.0.0.1:8642"):
        assert guard.refusal("POST", {**here, "origin": origin}) is not None


def test_writes_need_the_token() -> None:
    assert Guard([], None).write_refusal("anything") is not None
    guard = Guard([], Secret("the-token-of-the-server"))
    assert guard.writes
    assert guard.write_refusal("the-token-of-the-server") is None
    for wrong in (None, "", "the-token-of-the-serve", "the-token-of-the-server "):
        assert guard.write_refusal(wrong) is not None


def test_a_secret_never_shows_itself() -> None:
    secret = Secret("the-token-of-the-server")
    for shown in (repr(secret), str(secret), f"{secret}", f"{secret!r}", repr([secret])):
        assert "the-token" not in shown and "Secret(***)" in shown

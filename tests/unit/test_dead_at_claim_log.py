"""The warning a claim logs for each head it dead-letters, held to a burst a window: a file
full of undecodable rows says so without flooding the log, and says how much it left out."""

from __future__ import annotations

import types

import pytest

from harel_sa import rules


def test_a_burst_is_logged_then_counted_until_the_window_ends(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1000.0]
    monkeypatch.setattr(rules, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(rules, "_warned", {"since": 0.0, "logged": 0, "left_out": 0})
    caplog.set_level("WARNING", "harel_sa")
    for seq in range(rules.WARN_BURST + 5):
        rules.warn_dead_at_claim(seq, "g", "undecodable event: bad\n  input_value=secret", "w")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == rules.WARN_BURST
    assert all("secret" not in line for line in lines)
    assert lines[-1] == f"claim dead-lettered seq {rules.WARN_BURST - 1} of group 'g': " + (
        "undecodable event: bad"
    )
    now[0] += rules.WARN_WINDOW - 0.1  # still the same window: counted, not logged
    rules.warn_dead_at_claim(99, "g", "why", "w")
    assert len(caplog.records) == rules.WARN_BURST
    now[0] += 0.2  # a new window: logged, with what was left out
    rules.warn_dead_at_claim(100, "g", "why", "w")
    assert caplog.records[-1].getMessage() == (
        "claim dead-lettered seq 100 of group 'g': why (6 more left out of this log before)"
    )

"""``-p outcomes --outcomes FILE``: each test's outcome, by node id, written as JSON to FILE.

``{node id: {"outcome": "passed" | "failed" | "error" | "skipped", "error": text}}``: a run
compared with another needs every test's own outcome, which pytest's terminal summary gives
only for some (skips are grouped by reason) and its JUnit XML only with the node id split up.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

#: The outcome of each test this process ran (one session a process).
_outcomes: dict[str, dict[str, str]] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--outcomes", metavar="FILE", help="write each test's outcome to FILE")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    seen = _outcomes.setdefault(report.nodeid, {"outcome": "passed", "error": ""})
    if report.failed:  # a failed setup or teardown is an error, as pytest counts them
        if seen["outcome"] in ("passed", "skipped"):
            seen["outcome"] = "failed" if report.when == "call" else "error"
        seen["error"] += report.longreprtext
    elif report.skipped and seen["outcome"] == "passed":
        seen["outcome"] = "skipped"


def pytest_sessionfinish(session: pytest.Session) -> None:
    if path := session.config.getoption("outcomes"):
        Path(path).write_text(json.dumps(_outcomes, indent=1))

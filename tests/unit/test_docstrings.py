"""Documents at human size (issue 41): every module of harel_sa opens with a docstring of at
most ten lines, and no comment or docstring quotes a timing of one machine (those belong in
bench/RESULTS.md, where the machine is named)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

import pytest

import harel_sa

PACKAGE = Path(harel_sa.__file__).parent
MODULES = sorted(PACKAGE.rglob("*.py"))
MAX_LINES = 10
# "\u00b5s" is a microsecond; "measured" then a number in the same sentence ("measured at 35").
MACHINE_TIMING = re.compile(r"\u00b5s|\bXeon\b|\bEPYC\b|\bVM\b|\bmeasured\b[^.;]*?\d")


def name(path: Path) -> str:
    return path.relative_to(PACKAGE.parent).as_posix()


def texts(source: str) -> Iterator[tuple[int, str]]:
    """Every comment and docstring of ``source``, with the line it starts on."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(
            node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        ) and (doc := ast.get_docstring(node, clean=False)):
            yield (node.body[0].lineno, doc)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield (token.start[0], token.string)


def test_the_package_has_modules() -> None:
    assert len(MODULES) > 20


@pytest.mark.parametrize("path", MODULES, ids=name)
def test_module_docstring_is_at_most_ten_lines(path: Path) -> None:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
    lines = len((doc or "").strip().splitlines())
    assert lines <= MAX_LINES, (
        f"{name(path)}'s module docstring is {lines} lines (at most {MAX_LINES}): state the"
        " contract there, and move the rationale of one function next to it"
    )


@pytest.mark.parametrize("path", MODULES, ids=name)
def test_no_comment_or_docstring_quotes_a_machines_timing(path: Path) -> None:
    hits = [
        f"{name(path)}:{line}: {found.group(0)!r}"
        for line, text in texts(path.read_text(encoding="utf-8"))
        for found in MACHINE_TIMING.finditer(text)
    ]
    assert not hits, (
        "a timing of one machine belongs in bench/RESULTS.md, keep the reason here: "
        + "; ".join(hits)
    )


@pytest.mark.parametrize(
    "text",
    [
        "35 to 60 \u00b5s a statement",
        "on a 2-vCPU VM",
        "an Intel Xeon",
        "AMD EPYC",
        "measured at 35 to 60",
        "measured: half of such checkpoints gave up after 0.5 s",
    ],
)
def test_the_pattern_catches_a_machines_timing(text: str) -> None:
    assert MACHINE_TIMING.search(text), text


@pytest.mark.parametrize(
    "text",
    [
        "busy_timeout=5.0",
        "lock_timeout 1 s",
        "retried for 120 s",
        "VMS",
        "unmeasured 3",
        "as measured. 2 more",
    ],
)
def test_the_pattern_leaves_contracts_alone(text: str) -> None:
    assert not MACHINE_TIMING.search(text), text

"""docs/failure-modes.md stays true to the tests: every test it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "failure-modes.md"


def references() -> list[tuple[str, str | None]]:
    """(test file, test name or None) for each `tests/...` or `::name` in the table; a bare
    `::name` belongs to the file named last before it in the same cell."""
    found: list[tuple[str, str | None]] = []
    for line in DOC.read_text().splitlines():
        if not line.startswith("|"):
            continue
        for cell in line.split("|"):
            current: str | None = None
            for ref in re.findall(r"`((?:tests/[\w/]+\.py)?(?:::\w+)?)`", cell):
                path, _, name = ref.partition("::")
                current = path or current
                if current:
                    found.append((current, name or None))
    return found


def test_every_test_the_failure_modes_table_names_exists() -> None:
    refs = references()
    assert len(refs) > 40
    for path, name in refs:
        source = ROOT / path
        assert source.is_file(), path
        if name is not None:
            assert re.search(rf"^(async )?def {name}\(", source.read_text(), re.M), (path, name)

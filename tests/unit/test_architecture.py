"""ARCHITECTURE.md's module table is true to the code: each module under ``harel_sa/`` has a
row, and the row's "uses" column names (in backticks) exactly the harel_sa modules it imports.

A package row (``worker/``, ``cli/``) stands for every module in it; imports among its own
modules are left out. ``harel_sa`` stands for the public face (``harel_sa/__init__.py``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "harel_sa"
TABLE_ROW = re.compile(r"^\| `([^`]+)`[^|]*\|(?:[^|]|\\\|)*\|(.*)\|\s*$")


def module_name(path: Path) -> str:
    """``harel_sa/sqlite/aio.py`` -> ``sqlite.aio``; ``harel_sa/__init__.py`` -> ``harel_sa``."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) or "harel_sa"


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports(path: Path) -> set[str]:
    """The harel_sa modules ``path`` imports (anywhere in it, under ``TYPE_CHECKING`` too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = []
            for alias in node.names:  # ``from harel_sa import watch``: the module watch
                whole = f"{node.module}.{alias.name}"
                names.append(whole if _short(whole) in MODULES else node.module)
        else:
            continue
        found |= {_short(n) for n in names if n.split(".")[0] == "harel_sa"}
    return found


def _short(dotted: str) -> str:
    return dotted if dotted == "harel_sa" else dotted.removeprefix("harel_sa.")


def table() -> dict[str, set[str]]:
    """The module table's rows: the module (``sqlite/aio.py``, ``worker/``) -> its uses."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    section = text.split("## Modules", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        match = TABLE_ROW.match(line)
        if match:
            assert match[1] not in rows, f"{match[1]} has two rows"
            rows[match[1]] = set(re.findall(r"`([^`]+)`", match[2]))
    return rows


def rows_under_harel_sa() -> dict[str, set[str]]:
    return {k: v for k, v in table().items() if (PACKAGE / k).exists()}


def members(row: str) -> list[str]:
    """The modules a row stands for."""
    if row.endswith("/"):
        room = row.rstrip("/").replace("/", ".")
        return [m for m in MODULES if m == room or m.startswith(room + ".")]
    return [module_name(PACKAGE / row)]


def test_every_module_has_exactly_one_row() -> None:
    covered = [m for row in rows_under_harel_sa() for m in members(row)]
    assert sorted(covered) == sorted(set(covered)), "a module is in two rows"
    assert set(covered) == set(MODULES)


@pytest.mark.parametrize("row", sorted(rows_under_harel_sa()))
def test_the_uses_column_is_what_the_module_imports(row: str) -> None:
    inside = members(row)
    room = row.rstrip("/").replace("/", ".") if row.endswith("/") else None
    used = set().union(*(imports(MODULES[m]) for m in inside))
    if room is not None:
        used = {u for u in used if u != room and not u.startswith(room + ".")}
    assert rows_under_harel_sa()[row] == used, f"ARCHITECTURE.md's row of {row}"


def test_the_check_reads_the_table() -> None:
    rows = rows_under_harel_sa()
    assert rows["sqlite/aio.py"] >= {"seam", "sqlite.watch"}
    assert "worker/" in rows and "cli/" in rows

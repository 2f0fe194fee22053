"""The worker's modules import one another without a cycle (``TYPE_CHECKING`` imports count: a
cycle there is a knot to untie all the same)."""

from __future__ import annotations

import ast
from graphlib import TopologicalSorter
from pathlib import Path

import harel_sa.worker

WORKER = Path(harel_sa.worker.__file__).parent


def worker_imports(path: Path) -> set[str]:
    """The ``harel_sa.worker`` modules ``path`` imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "harel_sa.worker":
                found |= {f"harel_sa.worker.{a.name}" for a in node.names}
            elif node.module.startswith("harel_sa.worker."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("harel_sa.worker.")}
    modules = {f"harel_sa.worker.{p.stem}" for p in WORKER.glob("*.py")}
    return found & modules


def test_the_worker_modules_import_one_another_without_a_cycle() -> None:
    graph = {
        f"harel_sa.worker.{p.stem}": worker_imports(p)
        for p in WORKER.glob("*.py")
        if p.stem != "__init__"
    }
    assert len(graph) > 5
    TopologicalSorter(graph).prepare()  # raises CycleError on a cycle

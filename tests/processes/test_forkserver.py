"""The tests' fork server preloads what its children need: a child starts with harel_sa's
transports and workers already imported (a preload that silently fails costs every crash
round's restart an interpreter's imports)."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from tests import forkserver


def _preloaded(results: Any) -> None:
    results.put(sorted(name for name in forkserver.PRELOAD if name in sys.modules))


def test_a_child_starts_with_every_installed_module_of_the_preload() -> None:
    ctx = forkserver.context()
    results = ctx.Queue()  # type: ignore[attr-defined]
    child = ctx.Process(target=_preloaded, args=(results,))  # type: ignore[attr-defined]
    child.start()
    try:
        found = results.get(timeout=60)
    finally:
        child.join(60)
    installed = [name for name in forkserver.PRELOAD if _installed(name)]
    assert found == sorted(installed)
    assert "harel_sa.worker.threads" in found


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False

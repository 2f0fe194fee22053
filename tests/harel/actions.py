"""The actions of the engine workload's machine (tests.harel.engine), importable by dotted path
from a worker process as harel resolves them."""

from __future__ import annotations

from typing import Any


def pick(stm: Any, event: Any, **_: Any) -> None:
    stm.execution_ctx["picked"] = event is None or event.kind


def done(stm: Any, event: Any, **_: Any) -> None:
    stm.execution_ctx["done"] = True

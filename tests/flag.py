"""A flag test processes share that a SIGKILL cannot wedge.

A ``multiprocessing`` Event guards its state with a lock: a process killed while inside
``is_set()`` holds that lock forever, and every other process's next ``is_set()`` blocks for
good (seen: the PostgreSQL fault test hung with all its workers on that lock). The crash and
fault tests kill processes at random, so their flags are one byte of shared memory, read and
written without a lock.
"""

from __future__ import annotations

from typing import Any


class Flag:
    """``set()`` once, ``is_set()`` anywhere; passed to processes as they start."""

    def __init__(self, ctx: Any) -> None:
        self._byte = ctx.RawValue("b", 0)

    def set(self) -> None:
        self._byte.value = 1

    def is_set(self) -> bool:
        return bool(self._byte.value)

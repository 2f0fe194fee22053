"""Worker processes for the process tests: started from the forkserver, each with its own log,
stopped with SIGTERM at the end (whatever the test's outcome) and waited for."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests import forkserver


@contextmanager
def worker_processes(
    body: Callable[..., None], target: str, logs: list[Path], kinds: list[tuple[bool, int]]
) -> Iterator[list[Any]]:
    """One process per ``(asyncio, batch)`` of ``kinds``, running ``body(target, log,
    asyncio, batch)``; yields them (alive while the block runs)."""
    ctx = forkserver.context()
    workers = [
        ctx.Process(target=body, args=(target, str(log), aio, batch))  # type: ignore[attr-defined]
        for log, (aio, batch) in zip(logs, kinds, strict=True)
    ]
    for w in workers:
        w.start()
    try:
        yield workers
    finally:
        for w in workers:
            if w.pid is not None:
                os.kill(w.pid, signal.SIGTERM)
        for w in workers:
            w.join(30)


def wait_for(predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)

"""``-p aiosqlite_stop``: aiosqlite 0.22.1's ``Connection.stop``, which harel's conftest calls, on
aiosqlite 0.22.0 (the lowest version harel_sa allows, which lacks it).

After each test, harel's ``test/conftest.py`` calls ``stop()`` on every aiosqlite connection whose
thread is still alive. On 0.22.0 ``close()`` returns just before its thread ends, so the call
comes often, and fails there with an AttributeError: a test error that harel's transports and
harel_sa's alike draw at random. This ``stop`` ends the thread as 0.22.0's own ``close`` does
(its worker ends on the stop sentinel), closed or not, and waits for it. Newer aiosqlite:
nothing is changed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiosqlite
from aiosqlite import core


def _stop(connection: Any) -> None:
    # The worker thread answers each job through the future's loop: a loop of our own, which
    # needs not run for that.
    loop = asyncio.new_event_loop()
    try:
        connection._tx.put_nowait((loop.create_future(), lambda: core._STOP_RUNNING_SENTINEL))
        connection._thread.join(timeout=5)
    finally:
        loop.close()


if not hasattr(aiosqlite.Connection, "stop"):
    aiosqlite.Connection.stop = _stop  # type: ignore[attr-defined]

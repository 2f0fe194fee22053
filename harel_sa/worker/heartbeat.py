"""The heartbeat: a thread of its own that extends every held lease each ``visibility / 3``.

``Worker`` extends through its transport, ``AsyncWorker`` through the transport's sync twin (or
its loop, where there is none). Each beat warns when the event loop has not run for a beat
(:class:`LoopProbe`) and when the beat itself starts late: a lease lapses when its beats are late
by a whole ``visibility``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from harel_sa.errors import HarelSAError
from harel_sa.events import Lease
from harel_sa.worker.runstate import RunState
from harel_sa.worker.side import SideThread

log = logging.getLogger("harel_sa.worker")

Extend = Callable[[Lease[Any]], bool]


class LoopProbe:
    """Tells, from another thread, how long an event loop has been unable to run a callback."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._sent: float | None = None  # when the unanswered ping was sent

    def blocked_for(self) -> float:
        """Seconds the last ping has waited for the loop (0: it answered, and a new one goes)."""
        sent = self._sent
        if sent is not None:
            return time.monotonic() - sent
        self._sent = time.monotonic()
        try:
            self.loop.call_soon_threadsafe(self._answer)
        except RuntimeError:  # the loop is closed: the run is over
            self._sent = None
        return 0.0

    def _answer(self) -> None:
        self._sent = None


class Heartbeat(SideThread):
    """Extends ``run``'s held leases with ``extend`` every ``heartbeat_period`` until
    :meth:`stop`; ``probe``, if given, watches the event loop (``through_loop``: ``extend``
    itself needs that loop)."""

    def __init__(
        self,
        run: RunState,
        extend: Extend,
        probe: LoopProbe | None = None,
        through_loop: bool = False,
    ) -> None:
        super().__init__("harel_sa-heartbeat")
        self.run, self.extend, self.probe = run, extend, probe
        self.through_loop = through_loop  # extends wait for the loop (no sync twin)

    def main(self) -> None:
        period = self.run.options.heartbeat_period
        last = time.monotonic()  # when the previous beat started
        try:
            while not self.stopped.wait(max(0.0, last + period - time.monotonic())):
                started = time.monotonic()
                if started - last > period * 1.5:
                    log.warning(
                        "heartbeat ran %.1fs late (leases last %gs): the process is starved "
                        "or the write lock was busy",
                        started - last - period,
                        self.run.options.visibility,
                    )
                last = started
                self._check_loop(period)
                self._extend_all()
        except BaseException as error:
            self.run.crashed(error)

    def _check_loop(self, period: float) -> None:
        if self.probe is None:
            return
        blocked = self.probe.blocked_for()
        if blocked >= period:
            log.warning(
                "the event loop has not run for %.1fs: a handler is blocking it (run blocking "
                "code with asyncio.to_thread); %s",
                blocked,
                "leases lapse if it lasts longer than the visibility"
                if self.through_loop
                else "the heartbeat thread keeps the leases alive",
            )

    def _extend_all(self) -> None:
        for lease in self.run.held():
            if self.stopped.is_set():
                return
            try:
                ok = self.extend(lease)
            except HarelSAError as error:  # a busy lock is not a lost lease: next beat retries
                self.run.failed("Extend", error)
                continue
            self.run.extended(lease, ok)

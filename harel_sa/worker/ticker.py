"""The ticker: a thread beside the heartbeat that publishes a worker's :class:`harel_sa.Periodic`
schedules.

Each pass (:meth:`Ticker.step`) publishes each schedule's last tick at or before "now" through
``publish_tick``, whose record makes it happen once across every worker, then sleeps until the
next tick (at most :data:`SLICE`). Ticks missed while no worker ran are not published one by
one: only the last, as a catch-up; a new schedule has no past.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Protocol

from harel_sa.periodic import Periodic
from harel_sa.seam import Clock
from harel_sa.worker.side import SideThread

log = logging.getLogger("harel_sa.worker")

#: The longest one sleep of a ticker lasts: its clock is read again at least this often.
SLICE = 0.25
#: How long a ticker waits after a failed publish before it tries again.
RETRY_AFTER = 1.0


class PublishesTicks(Protocol):
    """What a ticker publishes through: a sync transport (or its twin)."""

    def publish_tick(self, schedule: Periodic, tick: float, *, catch_up: bool = False) -> bool: ...


class Ticker(SideThread):
    """Publishes ``schedules`` through ``transport``; :meth:`start` runs it on a thread until
    :meth:`stop`; ``clock`` dates the ticks (the transport's own: ``transport.clock``)."""

    def __init__(
        self, transport: PublishesTicks, schedules: Sequence[Periodic], clock: Clock
    ) -> None:
        super().__init__("harel_sa-ticker")
        self.transport = transport
        self.schedules = tuple(schedules)
        self.clock = clock
        self.started = self.clock()
        self.done: dict[str, float] = {}  # the last tick this ticker published or saw done
        self.failing = False

    def due(self, now: float) -> list[tuple[Periodic, float, bool]]:
        """``(schedule, tick, catch_up)`` for each schedule whose last tick at or before
        ``now`` this ticker has not yet handled."""
        found = []
        for schedule in self.schedules:
            tick = schedule.latest(now)
            if self.done.get(schedule.name, -float("inf")) < tick:
                found.append((schedule, tick, tick < self.started))
        return found

    def handled(self, schedule: Periodic, tick: float, published: bool, catch_up: bool) -> None:
        self.done[schedule.name] = tick
        if published:
            what = "catch-up tick" if catch_up else "tick"
            log.info("periodic %s: published the %s of %s", schedule.name, what, schedule.at(tick))

    def failed(self, schedule: Periodic, error: Exception, keep_going: bool) -> None:
        """A tick's publish raised: raised again, or (``keep_going``: the worker's loop)
        logged, and the next pause is :data:`RETRY_AFTER` (the tick stays due)."""
        if not keep_going:
            raise error
        log.error("periodic %s: the tick's publish failed: %s", schedule.name, error)
        self.failing = True

    def sleep(self) -> float:
        """Seconds until the next tick of any schedule, at most :data:`SLICE` (after a failed
        publish, :data:`RETRY_AFTER`)."""
        if self.failing:
            self.failing = False
            return RETRY_AFTER
        now = self.clock()
        upcoming = min(schedule.following(now) for schedule in self.schedules)
        return max(0.0, min(SLICE, upcoming - now))

    def step(self, keep_going: bool = False) -> list[tuple[str, float]]:
        """One pass: publish each schedule's due tick; the ``(name, tick)`` this call published
        (a tick another worker published is handled, not listed). Raises what a publish
        raised (the tick stays due), unless ``keep_going`` (then logs it)."""
        published = []
        for schedule, tick, catch_up in self.due(self.clock()):
            try:
                wrote = self.transport.publish_tick(schedule, tick, catch_up=catch_up)
            except Exception as error:
                self.failed(schedule, error, keep_going)
                continue
            self.handled(schedule, tick, wrote, catch_up)
            if wrote:
                published.append((schedule.name, tick))
        return published

    def main(self) -> None:
        while not self.stopped.is_set():
            self.step(keep_going=True)
            self.stopped.wait(self.sleep())

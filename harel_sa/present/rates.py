"""Rates in and out of a queue from successive :class:`~harel_sa.models.Stats` snapshots: what
``harel-sa top`` and the web view show."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harel_sa.models import Stats


@dataclass(frozen=True)
class Rates:
    """Messages per second into the queue (published) and out of it (acked, dead, purged)."""

    seconds: float
    published: float
    settled: float


class Window:
    """The snapshots of the last ``seconds``, for rates."""

    def __init__(self, seconds: float) -> None:

        self.seconds = seconds
        self._seen: deque[tuple[float, Stats]] = deque()

    def add(self, when: float, stats: Stats) -> Rates | None:
        self._seen.append((when, stats))
        while len(self._seen) > 2 and when - self._seen[1][0] >= self.seconds:
            self._seen.popleft()
        first_at, first = self._seen[0]
        span = when - first_at
        if span <= 0:
            return None  # one snapshot: no rate yet (rather than a division by ~0)
        published = stats.published - first.published
        settled = published - (stats.messages - first.messages)
        return Rates(span, published / span, settled / span)

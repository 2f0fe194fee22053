"""A small progress bar on stderr, drawn only on a terminal (or when forced)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

_RATE_AFTER = 0.1  # seconds


class ProgressBar:
    """``label [#####-----] done/total pct rate/s`` redrawn in place at most every ``every``
    seconds. Disabled (draws nothing) unless ``enabled`` is ``True``, or ``None`` and the
    stream is a terminal; stdout is never touched, so it stays parseable.
    """

    def __init__(
        self,
        total: int,
        *,
        label: str = "",
        enabled: bool | None = None,
        stream: TextIO | None = None,
        width: int = 30,
        every: float = 0.1,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = isatty(self.stream) if enabled is None else enabled
        self.total, self.label, self.width, self.every = max(total, 1), label, width, every
        self._start: float | None = None  # the first update: the rate counts from there
        self._drawn = 0.0
        self._line = 0

    def update(self, done: int, note: str = "", *, force: bool = False) -> None:
        """Show ``done`` of ``total`` (and ``note``), unless drawn less than ``every`` ago."""
        now = time.monotonic()
        if self._start is None:
            self._start = now
        if not self.enabled or (not force and now - self._drawn < self.every):
            return
        self._drawn = now
        fraction = min(1.0, done / self.total)
        filled = int(fraction * self.width)
        elapsed = now - self._start
        # No rate before a tenth of a second has passed: the first frame would divide by ~0.
        rate = f"{done / elapsed:7.0f}/s" if elapsed >= _RATE_AFTER else "      -/s"
        line = (
            f"{self.label} [{'#' * filled}{'-' * (self.width - filled)}] "
            f"{done}/{self.total} {fraction:4.0%} {rate} {note}"
        ).rstrip()
        self.stream.write("\r" + line.ljust(self._line))
        self.stream.flush()
        self._line = len(line)

    def close(self) -> None:
        """End the bar's line (if one was drawn)."""
        if self.enabled and self._line:
            self.stream.write("\n")
            self.stream.flush()
            self._line = 0


def isatty(stream: TextIO | None) -> bool:
    """Whether ``stream`` is a terminal; ``False`` for ``None``, a closed stream or one
    without ``isatty``."""
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):
        return False

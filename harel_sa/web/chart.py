"""The page's chart of the last minutes: the backlog and the rate out, as inline SVG (no
script, so the page's ``default-src 'none'`` holds). A point is taken at each reading of the
page (its refresh), kept for :data:`SPAN` seconds."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from harel_sa.present.format import age

#: How far back the chart reaches (seconds), and its drawing's size.
SPAN = 600.0
WIDTH, HEIGHT = 480, 120


@dataclass(frozen=True)
class Line:
    """One series, drawn: its ``points`` attribute and its highest value (the top of its
    scale)."""

    points: str
    top: float


@dataclass(frozen=True)
class Chart:
    """The backlog (messages waiting) and the rate out (messages a second), over ``seconds``."""

    backlog: Line
    out: Line
    seconds: float

    @property
    def span(self) -> str:
        """How far back it reaches, for people (``42.0s``, ``9m58s``)."""
        return age(self.seconds)


class History:
    """The readings of the last :data:`SPAN` seconds: (when, backlog, rate out)."""

    def __init__(self) -> None:
        self._points: deque[tuple[float, float, float]] = deque()

    def add(self, when: float, backlog: float, out: float | None) -> None:
        self._points.append((when, backlog, 0.0 if out is None else out))
        while self._points and when - self._points[0][0] > SPAN:
            self._points.popleft()

    def chart(self) -> Chart | None:
        """The chart, once there are two readings to draw a line through."""
        if len(self._points) < 2:
            return None
        first, last = self._points[0][0], self._points[-1][0]
        span = max(last - first, 1e-9)
        return Chart(
            _line([(t - first, b) for t, b, _ in self._points], span),
            _line([(t - first, o) for t, _, o in self._points], span),
            span,
        )


def _line(points: list[tuple[float, float]], span: float) -> Line:
    top = max(value for _, value in points)
    scale = top or 1.0  # all zero: a line along the bottom
    drawn = " ".join(
        f"{x / span * WIDTH:.1f},{HEIGHT - value / scale * (HEIGHT - 4) - 2:.1f}"
        for x, value in points
    )
    return Line(drawn, top)

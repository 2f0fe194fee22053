"""Exceptions a handler raises to steer its own message.

A handler that returns has its message acked; one that raises any other exception has it
retried after the worker's backoff. These two say what to do instead:

- :class:`Retry`: retry after ``delay`` seconds (not the backoff's delay). The delivery still
  counts toward ``max_deliveries``: at the last one the message is dead-lettered instead.
- :class:`DeadLetter`: give up now: the message moves to the dead table with ``reason``.
"""

from __future__ import annotations

from harel_sa import validate


class HandlerControl(Exception):
    """Base class of the exceptions a handler raises to steer its message."""


class Retry(HandlerControl):
    """Retry this message after ``delay`` seconds (``0``: at once); its group waits meanwhile."""

    def __init__(self, delay: float, reason: str = "") -> None:
        self.delay = validate.seconds("delay", delay, allow_zero=True)
        self.reason = reason
        super().__init__(f"retry in {self.delay:g}s" + (f": {reason}" if reason else ""))


class DeadLetter(HandlerControl):
    """Give up on this message now: it moves to the dead table with ``reason``."""

    def __init__(self, reason: str) -> None:
        self.reason = validate.required_text("reason", reason)
        super().__init__(reason)

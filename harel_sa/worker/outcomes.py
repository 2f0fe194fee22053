"""What a handler ended with (shared by the run's decisions, the batches and the steps)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Returned:
    """The handler returned."""


@dataclass(frozen=True, slots=True)
class Raised:
    """The handler raised ``error`` (an ``Exception``: retry, or what it asks for)."""

    error: Exception


@dataclass(frozen=True, slots=True)
class Interrupted:
    """The handler raised a ``BaseException`` that must end the run (``KeyboardInterrupt``,
    ``SystemExit``): its lease is released, and ``run()`` re-raises it once the run is over."""

    error: BaseException


Outcome = Returned | Raised | Interrupted
RETURNED = Returned()


def outcome_of(error: BaseException) -> Outcome:
    """What a handler's exception means for its message."""
    return Raised(error) if isinstance(error, Exception) else Interrupted(error)

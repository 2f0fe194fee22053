"""Argument checks shared by both transports, run before anything is written.

Each check returns the value in the form the statements want, or raises an
:class:`~harel_sa.InvalidArgumentError` (a ``ValueError``) or
:class:`~harel_sa.InvalidArgumentTypeError` (a ``TypeError``) that names the argument.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from pydantic import BaseModel

from harel_sa.errors import InvalidArgumentError, InvalidArgumentTypeError
from harel_sa.events import Lease
from harel_sa.schema import MAX_PRIORITY


def text(name: str, value: object) -> str:
    """A ``str`` that can be stored, empty included: UTF-8 cannot hold a lone surrogate."""
    if not isinstance(value, str):
        raise InvalidArgumentTypeError(f"{name} must be a str, not {type(value).__name__}")
    if not value.isascii():
        _encodable(name, value)
    return value


def required_text(name: str, value: object) -> str:
    """A non-empty ``str`` that can be stored (:func:`text`, not ``""``)."""
    checked = text(name, value)
    if not checked:
        raise InvalidArgumentError(f"{name} must not be empty")
    return checked


def _encodable(name: str, value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgumentError(
            f"{name} must be valid Unicode text, not {value!r:.80} "
            f"(a lone surrogate at position {exc.start})"
        ) from None


def storable(value: str) -> str:
    """``value`` as text every backend stores, for free text made of other text (a worker's
    dead-letter reason quoting a handler's exception): a lone surrogate (UTF-8 cannot hold
    one) and NUL (PostgreSQL's text cannot) written as their escapes, ``\\udcff``,
    ``\\x00``; any other text unchanged."""
    if value.isascii():
        return value.replace("\x00", "\\x00")
    escaped = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return escaped.replace("\x00", "\\x00")


def optional_text(name: str, value: object) -> str | None:
    return None if value is None else required_text(name, value)


def group_id(value: object) -> str:
    """A message's group id: any ``str`` that can be stored, ``""`` included (the harel engine
    publishes an execution created with ``execution_id=""`` to the group ``""``)."""
    return text("group_id", value)


def group_filter(value: object) -> str | None:
    """An admin call's group: ``None`` for every group, else the group of that id (``""`` is
    the group named ``""``)."""
    return None if value is None else text("group_id", value)


def seconds(name: str, value: object, *, allow_zero: bool) -> float:
    """A finite number of seconds, > 0 (or >= 0 with ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentTypeError(f"{name} must be a number, not {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidArgumentError(f"{name} must be a finite number {bound}, not {value!r}")
    return number


def priority(name: str, value: object) -> int:
    """An ``int`` in 0-4."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(f"{name} must be an int, not {type(value).__name__}")
    if not 0 <= value <= MAX_PRIORITY:
        raise InvalidArgumentError(f"{name} must be in 0-{MAX_PRIORITY}, not {value}")
    return value


def floor(name: str, value: object) -> int:
    """A claim's priority floor: any ``int``; one below 0 is 0 (every priority). One above
    :data:`MAX_PRIORITY` is returned as it is: no group has such a priority, so the caller
    claims nothing with it (the harel engine's ``Worker(priority_threshold=5)`` asks so)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(f"{name} must be an int, not {type(value).__name__}")
    return value if value > 0 else 0


def count(name: str, value: object) -> int:
    """A positive ``int``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 1:
        raise InvalidArgumentError(f"{name} must be >= 1, not {value}")
    return value


def seqs(value: object) -> tuple[int, ...] | None:
    """``None`` (no filter) or a collection of message ids."""
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidArgumentTypeError(f"seqs must be a list of int, not {type(value).__name__}")
    items = tuple(value)
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int):
            raise InvalidArgumentTypeError(f"seqs must hold int, not {type(item).__name__}")
    return items


def routing_keys(value: object) -> tuple[str, ...] | None:
    """``None`` (every group) or a non-empty collection of keys, in order, without repeats."""
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidArgumentTypeError(
            "routing_keys must be a list or tuple of str (a bare str is ambiguous), "
            f"not {type(value).__name__}"
        )
    keys = tuple(dict.fromkeys(required_text("routing key", key) for key in value))
    if not keys:
        raise InvalidArgumentError("routing_keys must name at least one key (or be None)")
    return keys


def event(value: object, event_type: type[BaseModel]) -> str:
    """The event's JSON: an instance of the transport's event type, or of any pydantic model
    whose JSON reads as one (the harel engine's own ``Event``, for one), so that what is
    published can always be claimed."""
    if isinstance(value, event_type):
        return value.model_dump_json()
    if not isinstance(value, BaseModel):
        raise InvalidArgumentTypeError(
            f"event must be a pydantic model ({event_type.__name__}), not {type(value).__name__}"
        )
    raw = value.model_dump_json()
    try:
        event_type.model_validate_json(raw)
    except ValueError as exc:
        kind = type(value)
        raise InvalidArgumentTypeError(
            f"event {kind.__module__}.{kind.__qualname__} does not read as "
            f"{event_type.__module__}.{event_type.__qualname__}: {exc}"
        ) from exc
    return raw


def lease(value: object) -> Lease[BaseModel]:
    if not isinstance(value, Lease):
        raise InvalidArgumentTypeError(f"lease must be a Lease, not {type(value).__name__}")
    return value


def leases(value: object) -> tuple[Lease[BaseModel], ...]:
    """A collection of leases (a list or tuple; not a single lease)."""
    if not isinstance(value, list | tuple):
        raise InvalidArgumentTypeError(
            f"leases must be a list or tuple of Lease, not {type(value).__name__}"
        )
    items = tuple(value)
    for item in items:
        if not isinstance(item, Lease):
            lease(item)  # raises
    return items

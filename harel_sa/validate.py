"""Argument checks shared by both transports, run before anything is written.

Each check returns the value in the form the statements want, or raises an
:class:`~harel_sa.InvalidArgumentError` (a ``ValueError``) or
:class:`~harel_sa.InvalidArgumentTypeError` (a ``TypeError``) that names the argument. The
bounds are the same on every backend: an id (a group id, a routing key, a worker id, an admin
call's group filter) is at most :data:`MAX_ID_BYTES` bytes of UTF-8; a limit is an ``int`` in
1-:data:`MAX_LIMIT`; a seq is a signed 64-bit ``int`` (:data:`MIN_SEQ`-:data:`MAX_SEQ`). NUL
(``"\\x00"``) is refused by PostgreSQL's backend alone (:func:`no_nul`): SQLite's text can hold
one, and its transports store it, as harel's do.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime

from pydantic import BaseModel

from harel_sa.errors import InvalidArgumentError, InvalidArgumentTypeError
from harel_sa.events import Lease
from harel_sa.rules import MAX_IN_FLIGHT, MAX_PRIORITY
from harel_sa.rules import MAX_LIMIT as MAX_LIMIT  # a bound the callers quote from here
from harel_sa.traces import stamp

#: The longest id an argument may give, in bytes of UTF-8: PostgreSQL's btree index entries hold
#: at most about 2,700 bytes, and each of its indexes on ids holds one id beside a few numbers (a
#: worker id, not indexed, is held to the same rule). Bytes, not characters: 1,024 characters
#: could be 4,096 bytes. For arguments only: a longer id another program stored is read and
#: claimed.
MAX_ID_BYTES = 1024
#: The seqs a row can have: both backends store a seq as a signed 64-bit integer.
MIN_SEQ, MAX_SEQ = -(2**63), 2**63 - 1
# No str this short can be over MAX_ID_BYTES (4 bytes at most per character): no measuring.
_SHORT_ID = MAX_ID_BYTES // 4


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


def identifier(name: str, value: object, *, empty: bool = False) -> str:
    """An id: :func:`required_text` (:func:`text` with ``empty``), at most
    :data:`MAX_ID_BYTES` bytes of UTF-8."""
    checked = text(name, value) if empty else required_text(name, value)
    if len(checked) > _SHORT_ID:
        size = len(checked) if checked.isascii() else len(checked.encode("utf-8"))
        if size > MAX_ID_BYTES:
            raise InvalidArgumentError(
                f"{name} must be at most {MAX_ID_BYTES} UTF-8 bytes, not {size} "
                f"({checked!r:.40}...)"
            )
    return checked


def no_nul(name: str, value: str | None) -> None:
    """PostgreSQL's check of a text argument, before anything is sent: its text cannot hold
    NUL (SQLite's can). psycopg refuses a lone text holding one itself, but sends one inside an
    array, for the server to refuse as a storage error after the statement began."""
    if value is not None and "\x00" in value:
        raise InvalidArgumentError(
            f"{name} holds NUL (\\x00), which PostgreSQL cannot store: {value!r:.80}"
        )


def storable(value: str) -> str:
    """``value`` as text every backend stores, for free text made of other text (a worker's
    dead-letter reason quoting a handler's exception): a lone surrogate (UTF-8 cannot hold
    one) and NUL (PostgreSQL's text cannot) written as their escapes, ``\\udcff``,
    ``\\x00``; any other text unchanged."""
    if value.isascii():
        return value.replace("\x00", "\\x00")
    escaped = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return escaped.replace("\x00", "\\x00")


def group_id(value: object) -> str:
    """A message's group id: an :func:`identifier`, ``""`` included (the harel engine
    publishes an execution created with ``execution_id=""`` to the group ``""``)."""
    return identifier("group_id", value, empty=True)


def group_filter(value: object) -> str | None:
    """An admin call's group: ``None`` for every group, else the group of that id (``""`` is
    the group named ``""``)."""
    return None if value is None else identifier("group_id", value, empty=True)


def worker_id(value: object) -> str:
    """A worker's id: a non-empty :func:`identifier`."""
    return identifier("worker_id", value)


def routing_key(value: object) -> str | None:
    """A publish's routing key: ``None`` (none), else a non-empty :func:`identifier`."""
    return None if value is None else identifier("routing_key", value)


def key(value: object) -> str | None:
    """A publish's key: ``None`` (none), else a non-empty :func:`identifier`."""
    return None if value is None else identifier("key", value)


def cancel_key(value: object) -> str:
    """The key a ``cancel`` names: a :func:`key`, required."""
    checked = key(value)
    if checked is None:
        raise InvalidArgumentTypeError("key must be a str, not NoneType")
    return checked


def on_key(value: object) -> bool:
    """``"keep"`` (``False``) or ``"replace"`` (``True``): what a keyed publish does to the
    waiting message with its key."""
    if value == "keep" or value == "replace":
        return value == "replace"
    if not isinstance(value, str):
        raise InvalidArgumentTypeError(f"on_key must be a str, not {type(value).__name__}")
    raise InvalidArgumentError(f"on_key must be 'keep' or 'replace', not {value!r:.40}")


def due(delay: object, not_before: object) -> tuple[float | None, float] | None:
    """A publish's time options as ``(at, delay)``: ``None`` (now) when neither is given; else
    ``at``, an epoch instant (``not_before``: an aware ``datetime``, or epoch seconds on the
    transport's clock), or ``None`` and ``delay`` seconds from now. Both given, a naive
    datetime, a negative, NaN or infinite number are refused."""
    if delay is not None and not_before is not None:
        raise InvalidArgumentError("give delay or not_before, not both")
    if delay is not None:
        return None, seconds("delay", delay, allow_zero=True)
    if not_before is None:
        return None
    if isinstance(not_before, datetime):
        if not_before.tzinfo is None or not_before.utcoffset() is None:
            raise InvalidArgumentError(
                "not_before must be an aware datetime (with a tzinfo), not a naive one"
            )
        return not_before.timestamp(), 0.0
    return seconds("not_before", not_before, allow_zero=True), 0.0


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


def in_flight(name: str, value: object) -> int | None:
    """A group's ``max_in_flight``: an ``int`` in 1-:data:`~harel_sa.rules.MAX_IN_FLIGHT`;
    ``None`` for 1 (a group without the column set runs one message at a time)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(f"{name} must be an int, not {type(value).__name__}")
    if not 1 <= value <= MAX_IN_FLIGHT:
        raise InvalidArgumentError(f"{name} must be in 1-{MAX_IN_FLIGHT}, not {value}")
    return None if value == 1 else value


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


def limit(value: object) -> int:
    """A call's ``limit``: a :func:`count` of at most :data:`MAX_LIMIT` (SQLite's driver
    cannot bind an ``int`` past 64 bits, PostgreSQL's ``LIMIT`` takes one)."""
    checked = count("limit", value)
    if checked > MAX_LIMIT:
        raise InvalidArgumentError(f"limit must be <= {MAX_LIMIT}, not {checked}")
    return checked


def seqs(value: object) -> tuple[int, ...] | None:
    """``None`` (no filter) or a collection of message ids, each in
    :data:`MIN_SEQ`-:data:`MAX_SEQ` (a seq no row can have is a caller's error, not a miss)."""
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidArgumentTypeError(f"seqs must be a list of int, not {type(value).__name__}")
    items = tuple(value)
    for item in items:
        if isinstance(item, bool) or not isinstance(item, int):
            raise InvalidArgumentTypeError(f"seqs must hold int, not {type(item).__name__}")
        if not MIN_SEQ <= item <= MAX_SEQ:
            raise InvalidArgumentError(
                f"seqs must hold signed 64-bit integers ({MIN_SEQ} to {MAX_SEQ}), not {item}"
            )
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
    keys = tuple(dict.fromkeys(identifier("routing key", key) for key in value))
    if not keys:
        raise InvalidArgumentError("routing_keys must name at least one key (or be None)")
    return keys


def event(value: object, event_type: type[BaseModel]) -> str:
    """The event's JSON: an instance of the transport's event type, or of any pydantic model
    whose JSON reads as one (the harel engine's own ``Event``, for one), so that what is
    published can always be claimed."""
    if isinstance(value, event_type):
        return _json_of(value)
    if not isinstance(value, BaseModel):
        raise InvalidArgumentTypeError(
            f"event must be a pydantic model ({event_type.__name__}), not {type(value).__name__}"
        )
    raw = _json_of(value)
    try:
        event_type.model_validate_json(raw)
    except ValueError as exc:
        kind = type(value)
        raise InvalidArgumentTypeError(
            f"event {kind.__module__}.{kind.__qualname__} does not read as "
            f"{event_type.__module__}.{event_type.__qualname__}: {exc}"
        ) from exc
    return raw


def _json_of(event: BaseModel) -> str:
    """The event's JSON; ``InvalidArgumentError`` naming the first value that has none (an
    ``object()`` in ``data``, say), before anything is written."""
    try:
        return event.model_dump_json()
    except ValueError as exc:  # pydantic's PydanticSerializationError
        where = _unserializable(dict(event), type(event).__name__)
        raise InvalidArgumentError(
            f"event cannot be stored as JSON: {where or type(event).__name__}: {exc}"
        ) from None


def _unserializable(value: object, path: str) -> str | None:
    """The path of the first value under ``value`` that pydantic cannot write as JSON."""
    from pydantic_core import to_json

    items: Iterable[tuple[object, object]] | None = None
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    if items is None:
        try:
            to_json(value)
        except ValueError:
            return path
        return None
    for key, item in items:
        inner = _unserializable(item, f"{path}.{key}" if isinstance(key, str) else f"{path}[{key}]")
        if inner is not None:
            return inner
    return None


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


#: A message to publish: ``(group_id, event_json, priority, routing_key, max_in_flight)``; the
#: last is ``None`` for 1 (one at a time), as the group row stores it.
Row = tuple[str, str, int, str | None, int | None]


def message_row(
    event_type: type[BaseModel],
    group: object,
    body: object,
    level: object,
    key: object,
    at_once: object = 1,
) -> Row:
    """One message to publish (group id, event, priority, routing key, max_in_flight),
    validated: every backend's publish."""
    return (
        group_id(group),
        stamp(event(body, event_type), event_type),
        priority("priority", level),
        routing_key(key),
        in_flight("max_in_flight", at_once),
    )


def message_rows(
    event_type: type[BaseModel], items: object, level: object, key: object, at_once: object = 1
) -> list[Row]:
    """``(group_id, event)`` pairs to publish together, all validated before any is sent
    (the priority, routing key and max_in_flight first, once for every item)."""
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise InvalidArgumentTypeError("items must be an iterable of (group_id, event) pairs")
    group = (priority("priority", level), routing_key(key), in_flight("max_in_flight", at_once))
    rows = []
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise InvalidArgumentTypeError(
                f"each item must be a (group_id, event) tuple, not {item!r:.80}"
            )
        json = stamp(event(item[1], event_type), event_type)
        rows.append((group_id(item[0]), json, *group))
    return rows

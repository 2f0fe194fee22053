"""How the commands print times, ages, counts and stored events (text and JSON alike).

Times are UTC with a zone: ``2026-11-29T21:32:25Z`` in text and ISO-8601 in JSON; an event
is shown by its ``kind`` (never cut) and its data, and in JSON as the object it is (not as a
string of JSON inside JSON).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any


def utc_time(epoch: float | None, *, millis: bool = False) -> str:
    """``epoch`` as ISO-8601 in UTC, ``Z`` for the zone; ``-`` for ``None``; a number no
    calendar date has (a park of ``1e308`` seconds, a row another program wrote) as itself."""
    if epoch is None:
        return "-"
    try:
        moment = datetime.fromtimestamp(epoch, UTC)
    except (OverflowError, OSError, ValueError):
        return f"epoch {epoch:g} (no calendar date)"
    text = moment.isoformat(timespec="milliseconds" if millis else "seconds")
    return text.replace("+00:00", "Z")


def age(seconds: float | None) -> str:
    """A duration for people: ``12.3s``, ``4m05s``, ``2h03m``; ``-`` for ``None``."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds >= 1e9:  # a park of 1e308 seconds (another program's row) as itself, not in hours
        return f"{seconds:.3g}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def plural(n: int, word: str) -> str:
    """``1 message``, ``2 messages``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def one_line(text: str) -> str:
    """``text`` on one line: runs of white space, newlines included, become one space."""
    return " ".join(text.split())


def shorten(text: str, width: int) -> str:
    """``text`` on one line, cut to ``width`` characters with an ellipsis."""
    flat = one_line(text)
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def decoded(event: str) -> Any:
    """A stored event as the JSON value it holds, or ``None`` when it is not JSON."""
    try:
        return json.loads(event)
    except ValueError:
        return None


def kind_of(event: str) -> str:
    """The event's ``kind``, whole; ``?`` when the stored text has none."""
    value = decoded(event)
    kind = value.get("kind") if isinstance(value, dict) else None
    return kind if isinstance(kind, str) else "?"


def data_of(event: str) -> str:
    """The event's ``data`` as compact JSON, or the stored text when it is not an event."""
    value = decoded(event)
    if isinstance(value, dict) and "kind" in value:
        return json.dumps(value.get("data", {}), separators=(",", ":"), sort_keys=True)
    return event


def event_json(event: str) -> dict[str, Any]:
    """The JSON fields of a stored event: ``event`` as the object it is, or ``null`` with
    ``event_text`` holding the stored text when it is not JSON."""
    value = decoded(event)
    return {"event": value} if value is not None else {"event": None, "event_text": event}


def due_rows(s: Any) -> list[tuple[str, str]]:
    """When the first scheduled message is due (a :class:`~harel_sa.Stats`'), as a (label,
    value) row; none when nothing is scheduled."""
    if s.next_due is None:
        return []
    wait = s.next_due - s.now
    return [("next due", "now" if wait <= 0 else f"in {age(wait)}")]


def target_words(routing_key: str | None, group_id: str | None) -> str:
    """What a pause or a backoff holds, in words."""
    if group_id is not None:
        return f"group {group_id}"
    return "no routing key" if routing_key is None else f"routing key {routing_key}"


def held_rows(s: Any) -> list[tuple[str, str]]:
    """What is held back (a :class:`~harel_sa.Stats`' pauses and backoffs), as (label, value)
    rows; none when nothing is."""
    rows = []
    if s.paused:
        rows.append(
            ("paused", ", ".join(target_words(p.routing_key, p.group_id) for p in s.paused))
        )
    if s.limits:
        rows.append(("backing off", ", ".join(target_words(key, None) for key in s.limits)))
    return rows


def cleanup_rows(dead_rows: int | None, oldest_transaction: float | None) -> list[tuple[str, str]]:
    """What holds back VACUUM, as (label, value) rows: PostgreSQL's dead rows in the queue's
    tables and its oldest open transaction; nothing on SQLite (both ``None``)."""
    if dead_rows is None:
        return []
    return [("dead rows", str(dead_rows)), ("oldest transaction", age(oldest_transaction))]

"""Periodic publishes: :class:`Periodic`, a schedule a worker publishes an event on.

A schedule's ticks come from the schedule alone, so every process agrees on them: with
``every=S``, the multiples of ``S`` seconds since the epoch; with ``cron=EXPR``, croniter's
times (the ``cron`` extra) in ``timezone``. A transport's ``publish_tick`` moves the
schedule's record (``<prefix>_transport_periodic``, revision 0008) to the tick and writes the
message in one transaction, only when the record is older: each tick publishes once however
many workers, processes and hosts carry the schedule. The workers' ticker:
:mod:`harel_sa.worker.ticker`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel

from harel_sa import validate
from harel_sa.errors import InvalidArgumentError, InvalidArgumentTypeError

#: What a schedule publishes: an event, or a function of the tick's aware datetime giving one.
EventOrFactory = BaseModel | Callable[[datetime], BaseModel]


@dataclass(frozen=True, eq=False)  # compared and hashed as itself: its event may not hash
class Periodic:
    """Publish ``event`` to ``group_id`` at each tick of a schedule: ``every`` seconds (a
    number or a ``timedelta``; ticks at the multiples of it since the epoch) or ``cron`` (a
    cron expression read by croniter, its times in ``timezone``), exactly one of them.

    ``event`` is an event, or a callable given the tick's aware ``datetime`` (in ``timezone``)
    that returns one; it is called in each worker that reaches the tick, before the tick's
    record is checked, so keep it free of side effects. ``name`` identifies the schedule in the
    database: workers carrying schedules of one name share its ticks. A bad argument raises
    :class:`~harel_sa.InvalidArgumentError` here.
    """

    name: str
    _: KW_ONLY
    every: float | timedelta | None = None
    cron: str | None = None
    group_id: str
    event: EventOrFactory
    timezone: str = "UTC"
    #: ``every`` in seconds (``None`` for a cron schedule).
    period: float | None = field(init=False, repr=False, compare=False, default=None)
    zone: ZoneInfo = field(init=False, repr=False, compare=False, default=ZoneInfo("UTC"))

    def __post_init__(self) -> None:
        validate.identifier("name", self.name)
        validate.group_id(self.group_id)
        if (self.every is None) == (self.cron is None):
            raise InvalidArgumentError(
                f"Periodic {self.name!r} needs exactly one of every= and cron="
            )
        if self.every is not None:
            object.__setattr__(self, "period", _period(self.every))
        else:
            _cron_check(self.cron)
        if not isinstance(self.timezone, str):
            raise InvalidArgumentTypeError(
                f"timezone must be a str, not {type(self.timezone).__name__}"
            )
        try:
            object.__setattr__(self, "zone", ZoneInfo(self.timezone))
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise InvalidArgumentError(f"timezone {self.timezone!r} is not a known zone") from exc
        if not (isinstance(self.event, BaseModel) or callable(self.event)):
            raise InvalidArgumentTypeError(
                "event must be a pydantic model or a callable taking the tick's datetime, "
                f"not {type(self.event).__name__}"
            )

    def latest(self, now: float) -> float:
        """The schedule's last tick at or before ``now`` (epoch seconds)."""
        if self.period is not None:
            tick = math.floor(now / self.period) * self.period
            return tick - self.period if tick > now else tick
        it = _croniter(self.cron, self.at(now))
        before = float(it.get_prev(float))
        after = float(_croniter(self.cron, self.at(before)).get_next(float))
        return after if after <= now else before

    def following(self, now: float) -> float:
        """The schedule's first tick after ``now``."""
        if self.period is not None:
            tick = (math.floor(now / self.period) + 1) * self.period
            return tick + self.period if tick <= now else tick
        return float(_croniter(self.cron, self.at(now)).get_next(float))

    def at(self, tick: float) -> datetime:
        """``tick`` as an aware datetime in the schedule's timezone."""
        return datetime.fromtimestamp(tick, self.zone)

    def event_at(self, tick: float) -> BaseModel:
        """The event of ``tick``."""
        if isinstance(self.event, BaseModel):
            return self.event
        made = self.event(self.at(tick))
        if not isinstance(made, BaseModel):
            raise InvalidArgumentTypeError(
                f"Periodic {self.name!r}'s event function returned {type(made).__name__}, "
                "not a pydantic model"
            )
        return made


def schedules(value: object) -> tuple[Periodic, ...]:
    """A worker's ``periodic=``: ``Periodic`` items, no two with one name."""
    if isinstance(value, str | bytes | Periodic) or not isinstance(value, Iterable):
        raise InvalidArgumentTypeError("periodic must be a list of harel_sa.Periodic")
    items = tuple(value)
    seen: set[str] = set()
    for item in items:
        if not isinstance(item, Periodic):
            raise InvalidArgumentTypeError(
                f"periodic must hold harel_sa.Periodic items, not {type(item).__name__}"
            )
        if item.name in seen:
            raise InvalidArgumentError(f"two periodic schedules are named {item.name!r}")
        seen.add(item.name)
    return items


def _period(every: object) -> float:
    if isinstance(every, timedelta):
        seconds = every.total_seconds()
    elif isinstance(every, int | float) and not isinstance(every, bool):
        seconds = float(every)
    else:
        raise InvalidArgumentTypeError(
            f"every must be seconds or a timedelta, not {type(every).__name__}"
        )
    if not (math.isfinite(seconds) and seconds > 0):
        raise InvalidArgumentError(f"every must be a finite time above 0, not {every!r}")
    return seconds


def _cron_check(expression: object) -> None:
    if not isinstance(expression, str):
        raise InvalidArgumentTypeError(f"cron must be a str, not {type(expression).__name__}")
    try:
        _croniter(expression, datetime.now(ZoneInfo("UTC"))).get_next(float)
    except InvalidArgumentError:
        raise
    except (ValueError, KeyError, TypeError) as exc:  # croniter's errors are ValueErrors
        raise InvalidArgumentError(f"cron {expression!r} is not a cron expression: {exc}") from exc


def _croniter(expression: str | None, start: datetime) -> Any:
    try:
        from croniter import croniter  # type: ignore[import-untyped,unused-ignore]
    except ImportError as exc:
        raise InvalidArgumentError(
            "a cron schedule needs croniter: pip install 'harel-sa[cron]'"
        ) from exc
    return croniter(expression, start)

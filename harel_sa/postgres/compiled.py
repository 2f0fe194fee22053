"""A statement as the PostgreSQL server prepares it (:class:`Statement`, compiled from a Core
``text()`` construct by SQLAlchemy's PostgreSQL dialect, :func:`positional`), and the SQL
fragments every module of statements shares: the server's "now", the ready channel's
``NOTIFY``, when a lease is live."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from sqlalchemy import TextClause, text
from sqlalchemy.dialects.postgresql.base import PGDialect

from harel_sa.schema import Names

#: PostgreSQL's dialect, numbering parameters ``$n`` as the server prepares them.
_DOLLAR = PGDialect(paramstyle="numeric_dollar")  # type: ignore[no-untyped-call]

#: The server's "now", constant within a statement. ``date_part`` gives the same double as
#: ``EXTRACT(EPOCH ...)::float8`` (tests/postgres hold it to that) without its detour: since
#: PostgreSQL 14 ``EXTRACT`` returns ``numeric``, and the cast to ``float8`` prints and parses
#: it, a cost paid at each row a claim's walk tests for a live lease.
SERVER_NOW = "date_part('epoch', statement_timestamp())"
CLIENT_NOW = ":now ::float8"


@dataclass(frozen=True, slots=True)
class Statement:
    """A statement as the server prepares it: ``$n`` parameters, the ``n``-th named
    ``names[n - 1]``. ``bind(params)`` gives the values of a mapping of names in that order
    (names the statement does not use are ignored); with two names or more it is an
    :func:`operator.itemgetter`, which costs no Python call."""

    sql: bytes
    names: tuple[str, ...]
    bind: Callable[[Mapping[str, Any]], Sequence[Any]] = field(compare=False)
    clause: TextClause = field(compare=False)  # what ``sql`` was compiled from
    #: Sent after the planner's settings for its transaction (a claim:
    #: :data:`harel_sa.postgres.driver.PLANNER`).
    steered: bool = field(default=False, compare=False)


def _binder(names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], Sequence[Any]]:
    if len(names) > 1:
        return itemgetter(*names)  # a tuple of the values
    if names:
        return lambda params: (params[names[0]],)  # itemgetter of one name is no tuple
    return lambda params: ()


def positional(sql: str, *, steered: bool = False) -> Statement:
    """``sql`` (parameters written ``:name``) as a Core ``text()`` construct, compiled by
    SQLAlchemy's PostgreSQL dialect with ``$n`` parameters numbered in the order names first
    appear (a name used twice is one parameter); ``steered`` as :class:`Statement` says."""
    clause = text(sql)
    compiled = clause.compile(dialect=_DOLLAR)
    names = tuple(compiled.positiontup or ())
    return Statement(str(compiled).encode(), names, _binder(names), clause, steered)


#: What a connection says of its database: two connections that say the same are to the same
#: database of the same server (an application's and a transport's, :mod:`harel_sa.outbox`).
IDENTITY = "SELECT current_database(), current_setting('port'), current_setting('cluster_name')"


def channel(names: Names) -> str:
    """The prefix's ``NOTIFY`` channel, ``<prefix>_transport_ready`` (an identifier, as the
    prefix is one): see :mod:`harel_sa.postgres.listen`."""
    return f"{names.prefix}_transport_ready"


def notify_sql(names: Names) -> str:
    """A select-list item that notifies the prefix's channel (once per row it is read in;
    PostgreSQL folds repeats within a transaction into one)."""
    return f"pg_notify('{channel(names)}', '')"


def live_lease(alias: str, now: str) -> str:
    """The row ``alias`` is leased or parked and its expiry is not past ``now``; a lock
    without an expiry has lapsed (as on SQLite), and so has one whose expiry is NaN (which
    PostgreSQL sorts above every number; SQLite stores it as NULL)."""
    return (
        f"({alias}.locked_by IS NOT NULL AND {alias}.lock_expiry IS NOT NULL "
        f"AND {alias}.lock_expiry >= {now} AND {alias}.lock_expiry <> 'NaN')"
    )

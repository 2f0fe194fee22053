"""What a PostgreSQL transport's driver runs: the shapes of an operation (:class:`Op`, a
program of statements; :class:`One`, a statement alone; :class:`Locked`, a statement under a
lock) and the "now" its statements are given. Apart from :mod:`~harel_sa.postgres.operations`
so that every module of programs (the queue's, the admin's, the scheduled and keyed ones) uses
them without importing another's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from harel_sa.postgres.compiled import Statement, positional
from harel_sa.seam import Bound, Program, Query, Result

T = TypeVar("T")
ClockOrServer = Callable[[], float] | None  # None: the server's clock

#: Begin of a read that must see one snapshot (stats).
BEGIN_SNAPSHOT = positional("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
BEGIN_WRITE = positional("BEGIN")


@dataclass(slots=True)
class Op(Bound[T]):
    """An operation ready to run: what starts its program (run again from the start when a
    driver retries), and the ``BEGIN`` of its transaction (``None``: its one statement runs
    alone, in autocommit, as most operations' does; sent with the first statement). A batch's
    claim runs in a transaction:
    one statement, unless it buries a head. ``retry_safe``: it only reads, so a driver may run
    it again on a fresh connection when the connection was lost."""

    start: Callable[[], Program[Statement, T]]
    begin: Statement | None = None
    retry_safe: bool = False


@dataclass(slots=True)
class One(Bound[T]):
    """An operation that is one statement sent alone, in autocommit: ``query``, and ``read``,
    which gives the operation's value from the statement's :class:`Result`. The same work as
    an :class:`Op` whose program yields ``query`` once and returns ``read`` of its result,
    without a generator to start and step (a publish or an ack is mostly client overhead
    besides its round trip). Its parameters are read when it is built: a client clock's "now"
    at the call, before any wait for a connection (a lease so extended ends no later).
    ``retry_safe`` as for :class:`Op`."""

    query: Query[Statement]
    read: Callable[[Result], T]
    retry_safe: bool = False


@dataclass(slots=True)
class Locked(Bound[T]):
    """An operation that is one statement run once a lock is held: ``lock`` (a statement
    that waits for a transaction-level advisory lock), then ``query``, in one implicit
    transaction, sent together (one round trip, :meth:`~harel_sa.postgres.wire.Wire.
    execute_after`). ``query``'s snapshot is taken once ``lock`` returned, so it sees what
    every holder of the lock before it committed. ``read`` gives the operation's value from
    ``query``'s :class:`Result`, or ``None``: both run again (a row changed under ``query``)."""

    lock: Query[Statement]
    query: Query[Statement]
    read: Callable[[Result], T | None]
    retry_safe: bool = False


#: What a transport runs: a program, one statement, or one statement under a lock.
Operation = Op[T] | One[T] | Locked[T]


def operation(bound: Bound[T]) -> Operation[T]:
    """``bound`` as the PostgreSQL operation it is; ``TypeError`` for another dialect's."""
    if isinstance(bound, Op | One | Locked):
        return bound
    raise TypeError(f"not a PostgreSQL operation: {type(bound).__name__}")


def nothing(result: Result) -> None:
    """The value of an operation that returns nothing (a publish)."""


def now_param(clock: ClockOrServer) -> float | None:
    """The "now" a statement is given: the client clock's, or ``None`` (the server's)."""
    return None if clock is None else clock()

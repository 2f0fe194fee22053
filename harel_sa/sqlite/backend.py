"""SQLite's side of the seam :class:`harel_sa.calls.Backend`: its statements and operations.

Both SQLite transports build their :class:`~harel_sa.calls.Calls` on :data:`SQLITE`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from harel_sa.calls import Call
from harel_sa.sqlite import admin, operations
from harel_sa.sqlite.statements import statements_for


def bound(operation: Callable[..., Any]) -> Callable[..., Call[Any]]:
    """``operation(conn, **arguments)`` as the seam binds it: given the arguments by keyword,
    it returns the :data:`~harel_sa.calls.Call` that the transport hands its connection."""
    # partial(partial, op)(**kw) is partial(op, **kw): built in C, no Python frame per call.
    return partial(partial, operation)


class SqliteBackend:
    """The operations of :mod:`~harel_sa.sqlite.operations` and :mod:`~harel_sa.sqlite.admin`
    over a sqlite3 connection, with :func:`~harel_sa.sqlite.statements.statements_for`."""

    statements = staticmethod(statements_for)
    publish = bound(operations.publish)
    claim = bound(operations.claim)
    ack_and_claim = bound(operations.ack_and_claim)
    claim_many = bound(operations.claim_many)
    ack_many = bound(operations.ack_many)
    ack_many_and_claim_many = bound(operations.ack_many_and_claim_many)
    ack = bound(operations.ack)
    give_back = bound(operations.give_back)
    nack = bound(operations.nack)
    extend = bound(operations.extend)
    dead_letter = bound(operations.dead_letter)
    stats = bound(admin.stats)
    peek = bound(admin.peek)
    release = bound(admin.release)
    purge = bound(admin.purge)
    dead = bound(admin.dead)
    requeue_dead = bound(admin.requeue_dead)
    purge_dead = bound(admin.purge_dead)


SQLITE = SqliteBackend()

"""SQLite's side of the seam :class:`harel_sa.calls.Backend`: its statements and operations.

Both SQLite transports build their :class:`~harel_sa.calls.Calls` on :data:`SQLITE`.
"""

from __future__ import annotations

from harel_sa.sqlite import admin, operations
from harel_sa.sqlite.statements import statements_for


class SqliteBackend:
    """The operations of :mod:`~harel_sa.sqlite.operations` and :mod:`~harel_sa.sqlite.admin`
    over a sqlite3 connection, with :func:`~harel_sa.sqlite.statements.statements_for`."""

    statements = staticmethod(statements_for)
    publish = staticmethod(operations.publish)
    claim = staticmethod(operations.claim)
    ack_and_claim = staticmethod(operations.ack_and_claim)
    claim_many = staticmethod(operations.claim_many)
    ack_many = staticmethod(operations.ack_many)
    ack_many_and_claim_many = staticmethod(operations.ack_many_and_claim_many)
    ack = staticmethod(operations.ack)
    give_back = staticmethod(operations.give_back)
    nack = staticmethod(operations.nack)
    extend = staticmethod(operations.extend)
    dead_letter = staticmethod(operations.dead_letter)
    stats = staticmethod(admin.stats)
    peek = staticmethod(admin.peek)
    release = staticmethod(admin.release)
    purge = staticmethod(admin.purge)
    dead = staticmethod(admin.dead)
    requeue_dead = staticmethod(admin.requeue_dead)
    purge_dead = staticmethod(admin.purge_dead)


SQLITE = SqliteBackend()

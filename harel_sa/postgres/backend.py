"""PostgreSQL's side of the seam :class:`harel_sa.calls.Backend`: its statements and operations.

Its operations are programs of statements (:class:`~harel_sa.postgres.operations.Op`) that a
sync or an async driver runs (:mod:`harel_sa.postgres.driver`), so binding one is calling it.
"""

from __future__ import annotations

from harel_sa.postgres import operations
from harel_sa.postgres.statements import Statements, statements_for
from harel_sa.schema import Names


class PostgresBackend:
    """The operations of :mod:`~harel_sa.postgres.operations`, with their statements for a
    prefix; "now" in them is the server's (``server_clock``) or the transport's clock."""

    def __init__(self, *, server_clock: bool) -> None:
        self.server_clock = server_clock

    def statements(self, names: Names) -> Statements:
        return statements_for(names, self.server_clock)

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
    stats = staticmethod(operations.stats)
    peek = staticmethod(operations.peek)
    release = staticmethod(operations.release)
    purge = staticmethod(operations.purge)
    dead = staticmethod(operations.dead)
    requeue_dead = staticmethod(operations.requeue_dead)
    purge_dead = staticmethod(operations.purge_dead)

"""The queue's rules that every dialect shares, each spelled once.

The statements and operations of ``sqlite/`` and ``postgres/`` take these from here, so the
two backends cannot drift apart on them: the sentinel of a parked message, how far past a
group's head a claim looks for a lease, the most rows one statement of a batch names, how much
of an error a dead letter keeps, and the reason a message that was delivered too often is
dead-lettered with.
"""

from __future__ import annotations

#: ``locked_by`` of a parked message (``nack(delay > 0)``); the original transport's sentinel.
PARKED = "__parked__"

#: How many messages after a group's head a claim also checks for a live lease. Only a head
#: is ever leased, so a lease further down means another program inserted messages with
#: smaller seqs below a leased head; up to this many such rows cannot give the group a second
#: lease (any depth would need an index on leased rows, which every claim and ack would pay).
LOOKAHEAD = 1

#: The most rows one statement of a batch names (the leases of a batch of acks, the groups and
#: heads of a batch of claims); a larger batch sends one statement per this many.
BATCH_MAX = 64

#: The most characters of an error a dead letter keeps.
MAX_ERROR = 2000


def exhausted(deliveries: int, max_deliveries: int | None) -> str | None:
    """Why a message delivered ``deliveries`` times is dead-lettered instead of delivered
    again under ``max_deliveries``, or ``None`` while it may be delivered."""
    if max_deliveries is None or deliveries < max_deliveries:
        return None
    times = "1 time" if deliveries == 1 else f"{deliveries} times"
    return f"delivered {times} (max {max_deliveries})"

"""The queue's rules that every dialect shares, each spelled once.

The statements and operations of ``sqlite/`` and ``postgres/`` take these from here, so the
two backends cannot drift apart on them: the sentinel of a parked message, how far past a
group's head a claim looks for a lease, the most rows one statement of a batch names, how much
of an error a dead letter keeps, the reason a message that was delivered too often is
dead-lettered with, and the warning a claim that dead-letters a head logs. Also the bounds and
defaults every layer quotes, the command's help among them (which imports nothing more).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Literal

log = logging.getLogger("harel_sa")

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

#: The prefix of the tables when none is given.
DEFAULT_PREFIX = "harel"
#: The highest priority a message may have (0 is the lowest): a claim's floor has an index
#: of its own for each priority above 0.
MAX_PRIORITY = 4

#: The most messages of one group a publish may let run at once (``max_in_flight``): a claim
#: looks at that many of the group's first messages, so the bound keeps its walk short.
MAX_IN_FLIGHT = 1000
#: The largest ``limit``: any batch or listing larger is a caller's error, not a request.
MAX_LIMIT = 2**31 - 1
#: What is between a transport and the server: ``"auto"``, found at each connection's start;
#: ``"session"``, a pooler that gives each client connection one server connection for its
#: life (PgBouncer's ``pool_mode = session``); ``"transaction"``, one whose server connections
#: change between transactions, whatever the start says.
Pooler = Literal["auto", "session", "transaction"]
POOLERS: tuple[Pooler, ...] = ("auto", "session", "transaction")
#: A worker's ``max_deliveries`` unless told otherwise: a message is handled at most this many
#: times, then dead-lettered (with the default backoff, about 8.5 minutes of retries).
DEFAULT_MAX_DELIVERIES = 10
#: A batching worker's ``ack_wait`` unless told otherwise: how long the first ack of a batch
#: waits for the acks of other handlers still running (a few commits' time).
DEFAULT_ACK_WAIT = 0.002


def exhausted(deliveries: int, max_deliveries: int | None) -> str | None:
    """Why a message delivered ``deliveries`` times is dead-lettered instead of delivered
    again under ``max_deliveries``, or ``None`` while it may be delivered."""
    if max_deliveries is None or deliveries < max_deliveries:
        return None
    times = "1 time" if deliveries == 1 else f"{deliveries} times"
    return f"delivered {times} (max {max_deliveries})"


#: At most this many warnings of :func:`warn_dead_at_claim` a :data:`WARN_WINDOW` (seconds):
#: a run of undecodable rows logs a line each up to it, then says how many it left out.
WARN_BURST, WARN_WINDOW = 10, 10.0
_warned = {"since": 0.0, "logged": 0, "left_out": 0}
_warned_lock = threading.Lock()
#: Messages claims moved to the dead table, by the claiming worker's id, not yet taken: only
#: for the ids a running worker counts (:func:`count_dead_at_claim`).
_dead_at_claim: dict[str, int] = {}


def warn_dead_at_claim(seq: int, group_id: str, reason: str, worker_id: str) -> None:
    """Log (WARNING) that a claim by ``worker_id`` moved the head ``seq`` of ``group_id`` to
    the dead table instead of leasing it: a worker whose every claim finds undecodable rows
    says so, and counts them (:func:`take_dead_at_claim`). The reason's first line only (a
    validation error's next lines quote the event's data)."""
    with _warned_lock:
        if worker_id in _dead_at_claim:
            _dead_at_claim[worker_id] += 1
        now = time.monotonic()
        if now - _warned["since"] >= WARN_WINDOW:
            _warned.update(since=now, logged=0)
        if _warned["logged"] >= WARN_BURST:
            _warned["left_out"] += 1
            return
        _warned["logged"] += 1
        left_out, _warned["left_out"] = _warned["left_out"], 0
    more = f" ({left_out} more left out of this log before)" if left_out else ""
    _log_dead_at_claim(seq, group_id, reason, more)


def count_dead_at_claim(worker_id: str, counting: bool) -> int:
    """Start (``counting``) or end counting the messages claims by ``worker_id`` dead-letter;
    how many there were since the last call (:func:`take_dead_at_claim`)."""
    with _warned_lock:
        taken = _dead_at_claim.pop(worker_id, 0)
        if counting:
            _dead_at_claim[worker_id] = 0
        return taken


def take_dead_at_claim(worker_id: str) -> int:
    """How many messages claims by ``worker_id`` dead-lettered since the last time asked."""
    if not _dead_at_claim.get(worker_id):  # the common case, without the lock
        return 0
    with _warned_lock:
        taken = _dead_at_claim[worker_id]
        _dead_at_claim[worker_id] = 0
        return taken


def _log_dead_at_claim(seq: int, group_id: str, reason: str, more: str) -> None:
    log.warning(
        "claim dead-lettered seq %d of group %r: %s%s",
        seq,
        group_id,
        reason.splitlines()[0] if reason else reason,
        more,
        extra={"seq": seq, "group_id": group_id},
    )

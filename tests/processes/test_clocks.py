"""The clock rule (issue 12, point 13): a lease is only as safe as the clocks of the processes
sharing the file agree. Every "now" (a lease's expiry, a park's end, the claim's test of both)
comes from the clock of the process that runs the call, so a process whose clock runs 30 s
fast sees a 10 s lease lapsed and a 20 s park over at once, and takes the message. On one host
every process's ``time.time`` is the same clock; an injected ``clock`` must agree with them.
This test shows the rule with two real processes, so that docs/failure-modes.md states it true.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from harel_sa import Event, SqliteTransport
from tests.forkserver import context

HANG = 60.0  # a guard against hangs, never a timing assertion
FAST = 30.0


def fast_claim(db: str, got: Any) -> None:
    """A process whose clock runs FAST seconds ahead claims once."""
    with SqliteTransport(db, clock=lambda: time.time() + FAST) as q:
        lease = q.claim("fast", 10.0)
        got.value = -1 if lease is None else lease.seq


def claim_in_a_fast_process(db: str) -> int:
    ctx = context()
    got = ctx.Value("q", 0)
    proc = ctx.Process(target=fast_claim, args=(db, got))
    proc.start()
    proc.join(HANG)
    assert proc.exitcode == 0
    return int(got.value)


def test_a_process_with_a_fast_clock_takes_live_leases_and_ends_parks_early(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "q.db")
    with SqliteTransport(db) as q:  # this process: time.time, the host's clock
        q.publish("leased", Event(kind="l"))
        q.publish("parked", Event(kind="p"))
        lease, other = q.claim("honest", 10.0), q.claim("honest", 10.0)
        assert lease is not None and other is not None
        assert (lease.group_id, other.group_id) == ("leased", "parked")
        assert q.nack(other, 20.0)  # parked for 20 s
        assert q.claim("honest", 10.0) is None  # by this clock both groups are in flight
        # By the fast clock the 10 s lease has lapsed, and the 20 s park is over.
        taken = {claim_in_a_fast_process(db), claim_in_a_fast_process(db)}
        assert taken == {lease.seq, other.seq}
        assert q.ack(lease) is False  # the honest worker lost its message to the fast one

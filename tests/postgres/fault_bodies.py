"""The processes of the PostgreSQL fault test (tests/postgres/test_faults.py).

Producers and workers loop over the transports' public API and append what they did to a log
of their own, one line per event, flushed at once (a SIGKILL loses no line written before it):

- producer: ``sent g n`` after ``publish`` returned, ``unsure g n ERROR`` when it raised a typed
  error (the message may or may not have committed);
- worker: ``got g n deliveries time`` after a claim returned a lease, ``acked g n`` / ``lost g n``
  after ``ack`` returned True / False, ``error op ERROR`` for a typed error.

Any other exception ends the process with a non-zero exit code and the traceback in the log.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any

from harel_sa import BusyError, ConnectionLostError, Event, PostgresTransport

TYPED = (ConnectionLostError, BusyError)


def _log(path: Path) -> Any:
    return path.open("a", buffering=1)  # line-buffered: one write per line


def _open(url: str, out: Any) -> PostgresTransport[Event]:
    """A transport, opened again after a typed error (the server may be restarting)."""
    while True:
        try:
            return PostgresTransport(url, create_schema=False, pool_size=2, busy_timeout=5)
        except TYPED as exc:
            out.write(f"error open {type(exc).__name__}\n")
            time.sleep(0.05)


def producer(url: str, log: str, groups: list[str], per_group: int, faulted: Any) -> None:
    """Publish a round (one message to each group) at a time: ``per_group`` rounds at least,
    and on until ``faulted`` is set, so the faults land while messages flow."""
    out = _log(Path(log))
    try:
        q = _open(url, out)
        n = 0
        while n < per_group or not faulted.is_set():
            for g in groups:
                try:
                    q.publish(g, Event(kind="job", data={"n": n}))
                except TYPED as exc:
                    out.write(f"unsure {g} {n} {type(exc).__name__}\n")
                    time.sleep(0.02)
                    continue
                out.write(f"sent {g} {n}\n")
            n += 1
            time.sleep(0.005 if n < per_group else 0.02)
        q.close()
    except BaseException:
        out.write("crash " + traceback.format_exc().replace("\n", " | ") + "\n")
        raise


def worker(url: str, log: str, name: str, vis: float, stop: Any) -> None:
    out = _log(Path(log))
    try:
        q = _open(url, out)
        while not stop.is_set():
            try:
                lease = q.claim(name, vis)
            except TYPED as exc:
                out.write(f"error claim {type(exc).__name__}\n")
                time.sleep(0.02)
                continue
            if lease is None:
                time.sleep(0.02)
                continue
            g, n = lease.group_id, lease.event.data["n"]
            out.write(f"got {g} {n} {lease.deliveries} {time.time()!r}\n")
            try:
                acked = q.ack(lease)
            except TYPED as exc:
                out.write(f"error ack {type(exc).__name__}\n")
                continue
            out.write(f"{'acked' if acked else 'lost'} {g} {n}\n")
        q.close()
    except BaseException:
        out.write("crash " + traceback.format_exc().replace("\n", " | ") + "\n")
        raise

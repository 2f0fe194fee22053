"""How long each revision holds SQLite's write lock on a big queue (issue 38).

    .venv/bin/python bench/run.py --only upgrade --merge   # into RESULTS.md
    .venv/bin/python bench/upgrade_locks.py [--quick]       # the table alone

A file as the original stdlib transport left it (no revision recorded) with 1,000,000
messages over 100,000 groups is upgraded one revision at a time (``harel_sa.migrations
.upgrade(path, revision=...)``), then a copy of it all at once (``harel-sa db upgrade``: one
transaction) and another by a transport's start-up (``create_schema=True``). Meanwhile a probe
process takes the write lock in a loop (``BEGIN IMMEDIATE; COMMIT`` with no busy wait), as a
worker's claim would; the longest it went without the lock is what a worker waits, which
``busy_timeout`` (5 s by default) must cover. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from common import DASH, Config, table

from harel_sa import SqliteTransport, revision_sql
from harel_sa import migrations as mig


def original(path: Path, messages: int, groups: int) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(
        "CREATE TABLE harel_transport_messages (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
        "group_id TEXT NOT NULL, event TEXT NOT NULL, locked_by TEXT, lock_expiry REAL)"
    )
    conn.execute(
        "CREATE TABLE harel_transport_groups (group_id TEXT PRIMARY KEY, "
        "last_claimed_at REAL NOT NULL DEFAULT 0.0, priority INT NOT NULL DEFAULT 0)"
    )
    conn.execute(
        "CREATE INDEX harel_transport_groups_by_last_claimed "
        "ON harel_transport_groups (last_claimed_at)"
    )
    conn.execute(
        "CREATE INDEX harel_transport_messages_by_group ON harel_transport_messages (group_id, seq)"
    )
    event = '{"id":"x","kind":"k","created_time":null,"received_time":null,"data":{"n":1}}'
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO harel_transport_messages (group_id, event) VALUES (?, ?)",
        ((f"g{n % groups}", event) for n in range(messages)),
    )
    conn.executemany(
        "INSERT INTO harel_transport_groups (group_id, priority) VALUES (?, ?)",
        ((f"g{n}", n % 5) for n in range(groups)),
    )
    conn.execute("COMMIT")
    conn.close()


def probe(
    path: str, stop: multiprocessing.synchronize.Event, longest: multiprocessing.Value
) -> None:  # type: ignore[name-defined]
    conn = sqlite3.connect(path, isolation_level=None, timeout=0)
    last = time.monotonic()
    while not stop.is_set():
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("COMMIT")
            now = time.monotonic()
            longest.value = max(longest.value, now - last)
            last = now
        except sqlite3.OperationalError:
            pass
        time.sleep(0.0005)
    conn.close()


def held(path: Path, step) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(seconds ``step`` took, the longest the probe went without the write lock meanwhile)."""
    stop = multiprocessing.Event()
    longest = multiprocessing.Value("d", 0.0)
    prober = multiprocessing.Process(target=probe, args=(str(path), stop, longest))
    prober.start()
    time.sleep(0.3)
    longest.value = 0.0
    began = time.monotonic()
    step()
    took = time.monotonic() - began
    time.sleep(0.1)
    stop.set()
    prober.join()
    return took, longest.value


def run(cfg: Config) -> dict[str, Any]:
    """The table's rows, for ``cfg``'s size (1,000,000 messages over 100,000 groups)."""
    messages, groups = cfg.size(100_000, 1_000_000), cfg.size(10_000, 100_000)
    base = cfg.fresh("upgrade-base")
    cfg.log(f"upgrade: a file of the original transport, {messages:,} messages")
    original(base, messages, groups)
    rows = []
    stepwise = cfg.fresh("upgrade-stepwise")
    shutil.copyfile(base, stepwise)
    for revision, _ in revision_sql.REVISIONS:
        took, longest = held(stepwise, lambda r=revision: mig.upgrade(stepwise, revision=r))
        rows.append([f"`{revision}` alone", took, longest])
    whole = cfg.fresh("upgrade-whole")
    shutil.copyfile(base, whole)
    took, longest = held(whole, lambda: mig.upgrade(whole))
    rows.append(["base to head, one run (`harel-sa db upgrade`)", took, longest])
    started = cfg.fresh("upgrade-startup")
    shutil.copyfile(base, started)
    took, longest = held(started, lambda: SqliteTransport(started).close())
    rows.append(["start-up (`create_schema=True`)", took, longest])
    return {"messages": messages, "groups": groups, "rows": rows}


def section(w: dict[str, Any], every: bool = False) -> list[str]:
    """The table; unless ``every``, the revisions upgraded one at a time in one row (their
    range)."""
    alone = [r for r in w["rows"] if r[0].endswith(" alone")] if not every else []
    rows = [[what, f"{took:.3f}", f"{longest:.3f}"] for what, took, longest in w["rows"]]
    if alone:
        span = [
            f"{min(r[k] for r in alone):.3f}{DASH}{max(r[k] for r in alone):.3f}" for k in (1, 2)
        ]
        rows = [[f"each of {len(alone)} revisions alone", *span]]
        rows += [[r[0], f"{r[1]:.3f}", f"{r[2]:.3f}"] for r in w["rows"] if r not in alone]
    return [
        "## Upgrading a live SQLite queue: how long the write lock is held (issue 38)",
        "",
        f"A file of {w['messages']:,} messages over {w['groups']:,} groups upgraded while a"
        " probe takes the write lock in a loop: its longest wait is a worker's, within"
        " `busy_timeout` (5 s); one repetition.",
        "",
        *table(["upgrade", "took (s)", "longest a writer waited (s)"], rows),
        "",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Config(quick=args.quick, reps=1, workdir=Path(tmp))
        print("\n".join(section(run(cfg), every=True)))


if __name__ == "__main__":
    main()

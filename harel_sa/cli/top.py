"""``harel-sa top``: a live view of a queue, refreshed every ``--interval`` seconds.

On a terminal it redraws one screen in place (with ``rich`` when installed, ``harel-sa[top]``;
plain ANSI otherwise): depth by state, the rates in and out over the last ``--window``
seconds, the oldest ready message's age, and the workers holding leases. Anywhere else (a
pipe, a file) it prints one plain ``key=value`` line per refresh, for logs and scripts.
Ctrl-C ends it (exit 0); ``--iterations N`` ends it after N refreshes.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from harel_sa.cli.common import OK, Commands, add_db_options, open_queue, queue_target
from harel_sa.cli.progress import isatty
from harel_sa.present.format import age, cleanup_rows, due_rows, held_rows, utc_time
from harel_sa.present.rates import Rates, Window

if TYPE_CHECKING:
    from harel_sa.models import Stats


def register(commands: Commands) -> None:
    p = commands.add_parser(
        "top",
        help="a live view: depth by state, rates, oldest ready age, workers",
        description="Watch a queue: refreshed in place on a terminal, one line per refresh "
        "elsewhere. Reads only. Ctrl-C ends it.",
    )
    add_db_options(p)
    p.add_argument("--interval", metavar="S", type=float, default=1.0, help="default: 1.0")
    p.add_argument(
        "--window", metavar="S", type=float, default=10.0, help="rates over S seconds (10)"
    )
    p.add_argument("--iterations", metavar="N", type=int, help="stop after N refreshes")
    p.add_argument("--plain", action="store_true", help="plain lines even on a terminal")
    p.set_defaults(func=cmd_top)


def cmd_top(args: argparse.Namespace) -> int:

    t = queue_target(args, must_exist=True)
    out = sys.stdout
    live = not args.plain and isatty(out)
    window = Window(args.window)
    screen = Screen(out, f"{t.shown} (prefix {t.prefix})") if live else None
    shown = 0
    try:
        with open_queue(t, read_only=True) as queue:  # it only reads, as stats
            while args.iterations is None or shown < args.iterations:
                stats: Stats = queue.stats()
                rates = window.add(time.monotonic(), stats)
                if screen is not None:
                    screen.draw(stats, rates)
                else:
                    print(plain_line(stats, rates), file=out, flush=True)
                shown += 1
                if args.iterations is None or shown < args.iterations:
                    time.sleep(args.interval)
    except KeyboardInterrupt:
        pass  # the way to leave top
    finally:
        if screen is not None:
            screen.close()
    return OK


def _rate(rates: Rates | None, which: str) -> str:
    return "-" if rates is None else f"{getattr(rates, which):.1f}/s"


def plain_line(s: Stats, rates: Rates | None) -> str:
    """One refresh as ``key=value`` pairs, for a pipe or a log."""
    workers = ",".join(f"{w}:{n}" for w, n in s.leases_by_worker.items()) or "-"
    return (
        f"{utc_time(s.now)} ready={s.ready} leased={s.in_flight} parked={s.parked} "
        f"dead={s.dead} scheduled={s.scheduled} groups={s.groups} in={_rate(rates, 'published')} "
        f"out={_rate(rates, 'settled')} oldest_ready={age(s.oldest_ready_age)} "
        + "".join(
            f"{label.replace(' ', '_')}={value} "
            for label, value in cleanup_rows(s.dead_rows, s.oldest_transaction_age)
        )
        + "".join(
            f"{label.replace(' ', '_')}={value.replace(' ', '_').replace(',_', ',')} "
            for label, value in held_rows(s)
        )
        + f"workers={workers}"
    )


def rows(s: Stats, rates: Rates | None) -> list[tuple[str, str]]:
    """One refresh as (label, value) rows, for a terminal."""
    window = "" if rates is None else f" (last {rates.seconds:.0f}s)"
    return [
        ("ready", str(s.ready)),
        ("leased", str(s.in_flight)),
        ("parked", str(s.parked)),
        ("dead", str(s.dead)),
        ("scheduled", str(s.scheduled)),
        *due_rows(s),
        ("groups", str(s.groups)),
        ("in" + window, _rate(rates, "published")),
        ("out" + window, _rate(rates, "settled")),
        ("oldest ready", age(s.oldest_ready_age)),
        *cleanup_rows(s.dead_rows, s.oldest_transaction_age),
        *held_rows(s),
    ]


class Screen:
    """One screen redrawn in place: ``rich.live`` when installed, plain ANSI otherwise."""

    def __init__(self, out: TextIO, title: str) -> None:
        self.out, self.title = out, title
        self._lines = 0
        self._live: Any = None
        try:
            from rich.console import Console
            from rich.live import Live
        except ImportError:
            return
        self._live = Live(console=Console(file=out), auto_refresh=False, transient=False)
        self._live.start()

    def draw(self, s: Stats, rates: Rates | None) -> None:
        if self._live is not None:
            self._live.update(self._rich(s, rates), refresh=True)
            return
        lines = [f"harel-sa top: {self.title}  {utc_time(s.now)}"]
        lines += [f"  {label:<20} {value:>12}" for label, value in rows(s, rates)]
        lines += ["  workers holding leases:"]
        lines += [f"    {w:<30} {n:>6}" for w, n in s.leases_by_worker.items()] or ["    -"]
        if self._lines:
            self.out.write(f"\x1b[{self._lines}F")  # back to the first line of the last frame
        self.out.write("".join(f"{line}\x1b[K\n" for line in lines) + "\x1b[J")
        self.out.flush()
        self._lines = len(lines)

    def _rich(self, s: Stats, rates: Rates | None) -> Any:
        from rich.console import Group
        from rich.table import Table

        queue = Table(title=f"harel-sa top: {self.title}  {utc_time(s.now)}", show_header=False)
        queue.add_column("what")
        queue.add_column("value", justify="right")
        for label, value in rows(s, rates):
            queue.add_row(label, value)
        workers = Table(title="workers holding leases")
        workers.add_column("worker")
        workers.add_column("leases", justify="right")
        for worker, n in s.leases_by_worker.items():
            workers.add_row(worker, str(n))
        return Group(queue, workers)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()

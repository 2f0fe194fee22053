"""``harel-sa demo``: producers and worker processes on an embedded SQLite file, verified.

The file (``--db``, default ``./harel-demo.db``) is created and brought to head if needed.
A database that holds other tables (an application's, or another prefix's queue, whose
workers would take the demo's messages) is refused (exit 2) unless ``--yes``. The demo needs
the prefix's queue empty at the start so it can check the end: one that still holds messages
(say, from an interrupted run) is refused unless ``--fresh``, which empties that prefix's
queue first and never deletes a file or a table harel_sa did not create. A database left
empty by a finished run is simply reused.
"""

from __future__ import annotations

import argparse
import os
from contextlib import closing

from harel_sa import demo
from harel_sa.cli.common import (
    FAILED,
    OK,
    CliError,
    Commands,
    Target,
    add_db_options,
    add_json_option,
    emit,
    open_queue,
    queue_target,
    server_errors,
    table,
)
from harel_sa.cli.progress import ProgressBar

DEFAULT_DB = "harel-demo.db"
_TABLES = (
    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
)
_PG_TABLES = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
_DEFAULTS = demo.DemoConfig(api=DEFAULT_DB)


def register(commands: Commands) -> None:
    p = commands.add_parser(
        "demo",
        help="producers and worker processes on a SQLite file, with a live check",
        description="Producers publish messages over many groups while worker processes "
        "drain them with harel_sa.Worker; prints throughput and each worker's share, and "
        "verifies every message was delivered once and in order within its group (exit 1 "
        "if not).",
    )
    add_db_options(p, default_db=DEFAULT_DB)
    sizes = p.add_argument_group("sizes")
    for name, help_ in (
        ("messages", "messages to publish"),
        ("groups", "groups they are spread over"),
        ("workers", "worker processes"),
        ("producers", "producer processes"),
        ("concurrency", "handlers per worker process (threads)"),
    ):
        default = getattr(_DEFAULTS, name)
        sizes.add_argument(
            f"--{name}", type=_positive, default=default, help=f"{help_} (default: {default})"
        )
    p.add_argument(
        "--work-ms", type=float, default=0.0, help="simulated work per message, ms (default: 0)"
    )
    p.add_argument(
        "--synchronous",
        choices=("FULL", "NORMAL"),
        default=_DEFAULTS.synchronous,
        help="SQLite durability (default: %(default)s; NORMAL fsyncs less)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=_DEFAULTS.timeout,
        help="give up (exit 1) after this many seconds (default: %(default)s)",
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="empty the prefix's queue first (its rows only; nothing else in the file)",
    )
    p.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="run in a database that also holds other tables (an application's)",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="draw the progress bar on stderr (default: only on a terminal)",
    )
    add_json_option(p)
    p.set_defaults(func=cmd_demo)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, not {text!r}")
    return value


def _prepare(t: Target, fresh: bool, yes: bool) -> None:
    """Make the database ready: at head, the prefix's queue empty (emptied first with
    ``--fresh``); one that holds other tables is refused unless ``yes``."""
    from harel_sa.schema import Names

    names = Names(t.prefix)
    others = sorted(_tables(t) - {*names.tables, names.version_table})
    if others and not yes:
        raise CliError(
            f"{t.shown} holds tables that are not the demo's (prefix {t.prefix}): "
            f"{', '.join(others)}. The demo publishes test messages (and --fresh empties prefix "
            f"{t.prefix}'s queue): run it on a database of its own, or add --yes"
        )
    with open_queue(t, create_schema=True) as q:
        if fresh:  # through the queue's own calls: only its rows go
            while batch := q.peek(None, 1000, scheduled=True):
                for group in {m.group_id for m in batch}:
                    q.purge(group)
            q.purge_dead()
        stats = q.stats()
    if stats.messages or stats.scheduled or stats.dead:
        raise CliError(
            f"{t.shown} already holds {stats.messages} message(s), {stats.scheduled} scheduled "
            f"and {stats.dead} dead under prefix {t.prefix}; pass --fresh to empty that queue "
            "first"
        )


def _tables(t: Target) -> set[str]:
    """The tables the database holds (for PostgreSQL, in its search path's first schema)."""
    from harel_sa.postgres.connect import is_postgresql
    from harel_sa.sqlite.connection import connect_read_only

    if is_postgresql(t.api):
        import psycopg

        from harel_sa.postgres.connect import conninfo

        with server_errors(t), psycopg.connect(conninfo(t.api), autocommit=True) as conn:
            found = conn.execute(_PG_TABLES).fetchall()
    elif t.path is None or os.path.exists(t.path):
        with closing(connect_read_only(t.api)) as conn:
            found = conn.execute(_TABLES).fetchall()
    else:
        return set()
    return {str(row[0]).lower() for row in found}


def cmd_demo(args: argparse.Namespace) -> int:
    t = queue_target(args, must_exist=False)
    if args.messages < args.groups:
        raise CliError("--messages must be at least --groups")
    _prepare(t, args.fresh, args.yes)
    config = demo.DemoConfig(
        api=t.api,
        prefix=t.prefix,
        messages=args.messages,
        groups=args.groups,
        workers=args.workers,
        producers=min(args.producers, args.groups),
        concurrency=args.concurrency,
        work=args.work_ms / 1000,
        synchronous=args.synchronous,
        timeout=args.timeout,
    )
    bar = ProgressBar(config.messages, label="delivered", enabled=args.progress)
    try:
        report = demo.run(config, lambda done, pub: bar.update(done, f"published {pub}"))
    finally:
        bar.close()
    if not report.problems:
        with open_queue(t) as q:
            left = q.stats()
        if left.messages or left.dead:
            report.problems.append(
                f"queue not empty at the end: {left.messages} message(s), {left.dead} dead"
            )
    emit(args, {**report.json(), "config": _config_json(config)}, _text(config, report))
    return OK if report.ok else FAILED


def _config_json(c: demo.DemoConfig) -> dict[str, object]:
    from harel_sa.postgres.connect import is_postgresql
    from harel_sa.redact import display

    return {
        "database": display(c.api),
        "prefix": c.prefix,
        "groups": c.groups,
        "workers": c.workers,
        "producers": c.producers,
        "concurrency": c.concurrency,
        "synchronous": None if is_postgresql(c.api) else c.synchronous,
    }


def _durability(c: demo.DemoConfig) -> str:
    """SQLite's durability setting, as the header names it (PostgreSQL has none of its own)."""
    from harel_sa.postgres.connect import is_postgresql

    return "" if is_postgresql(c.api) else f", synchronous={c.synchronous}"


def _text(c: demo.DemoConfig, r: demo.DemoReport) -> str:
    from harel_sa.redact import display

    total = max(sum(r.shares.values()), 1)
    shares = table(
        ["worker", "messages", "share"],
        [(name, n, f"{100 * n / total:.1f}%") for name, n in r.shares.items()],
        indent="  ",
    )
    verdict = (
        "verified: every message delivered once, in order within its group; queue empty"
        if r.ok
        else "FAILED: " + "; ".join(r.problems)
    )
    return (
        f"demo on {display(c.api)} (prefix {c.prefix}{_durability(c)}): "
        f"{c.messages} messages over {c.groups} groups, {c.producers} producer(s), "
        f"{c.workers} worker(s) x {c.concurrency} handler(s)\n"
        f"published  {r.messages} in {r.publish_seconds:.2f}s\n"
        f"delivered  {r.messages} in {r.seconds:.2f}s: throughput {r.throughput:.0f} msg/s\n"
        f"worker shares:\n{shares}\n{verdict}"
    )

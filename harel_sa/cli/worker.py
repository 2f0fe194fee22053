"""``harel-sa worker MODULE:CALLABLE``: run a handler on a queue, as a service would.

The handler is imported from ``MODULE`` (the current directory is on the path) and is
``CALLABLE(lease)``: a plain function runs on a :class:`~harel_sa.Worker` (threads), an
``async def`` on an :class:`~harel_sa.AsyncWorker`. Every option can also come from an
environment variable (:data:`SETTINGS`); a flag given on the command line wins. It logs to
stderr (``--log-level``, ``--log-format text|json``), serves Prometheus metrics with
``--metrics-port``, stops cleanly on SIGTERM/SIGINT (exit 0), and exits 2 on a bad import
path or option, 3 when the database is not at head.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import harel_sa
from harel_sa.cli import logs
from harel_sa.cli.common import OK, CliError, Commands, Target, open_queue, queue_target
from harel_sa.lazy import missing_extra
from harel_sa.rules import (
    DEFAULT_ACK_WAIT,
    DEFAULT_MAX_DELIVERIES,
    MAX_LIMIT,
    MAX_PRIORITY,
    POOLERS,
    Pooler,
)

if TYPE_CHECKING:
    from harel_sa.worker import WorkerStats

log = logging.getLogger("harel_sa.cli")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, not {text!r}")
    return value


def _whole(text: str, least: int, most: int = MAX_LIMIT) -> int:
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if not least <= value <= most:
        raise argparse.ArgumentTypeError(
            f"must be a whole number from {least} to {most}, not {text!r}"
        )
    return value


def _deliveries(text: str) -> int | str:
    return "none" if text.strip().lower() == "none" else _whole(text, 1)


def _choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip().upper() if choices == logs.LEVELS else text.strip().lower()
        if value not in choices:
            raise argparse.ArgumentTypeError(f"must be one of {', '.join(choices)}, not {text!r}")
        return value

    return parse


@dataclass(frozen=True)
class Setting:
    """An option of the command: its flag, its environment variable, how to read it."""

    flag: str
    env: str
    parse: Callable[[str], Any]
    default: Any
    help: str
    metavar: str = "N"

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


SETTINGS = (
    Setting("--db", "HAREL_SA_DB", str, None, "the SQLite file", "PATH"),
    Setting(
        "--url",
        "HAREL_SA_URL",
        str,
        None,
        "the database as a sqlite:///PATH or postgresql://… URL",
        "URL",
    ),
    Setting("--prefix", "HAREL_SA_PREFIX", str, "harel", "the table prefix", "NAME"),
    Setting(
        "--pooler",
        "HAREL_SA_POOLER",
        _choice(POOLERS),
        "auto",
        "PostgreSQL behind a pooler: auto (found at connect), session (LISTEN and settings "
        "kept: PgBouncer's pool_mode = session) or transaction",
        "MODE",
    ),
    Setting(
        "--event-type",
        "HAREL_SA_EVENT_TYPE",
        str,
        None,
        "the pydantic model the messages' events are (default harel_sa.Event)",
        "MODULE:CLASS",
    ),
    Setting("--worker-id", "HAREL_SA_WORKER_ID", str, None, "default: host:pid:random", "ID"),
    Setting("--concurrency", "HAREL_SA_CONCURRENCY", lambda t: _whole(t, 1), 1, "handlers at once"),
    Setting("--visibility", "HAREL_SA_VISIBILITY", _seconds, 30.0, "lease seconds", "S"),
    Setting(
        "--min-priority",
        "HAREL_SA_MIN_PRIORITY",
        lambda t: _whole(t, 0, MAX_PRIORITY),
        0,
        "priority floor",
    ),
    Setting(
        "--routing-key",
        "HAREL_SA_ROUTING_KEYS",
        lambda t: [k.strip() for k in t.split(",") if k.strip()],
        None,
        "serve only groups with this routing key (repeat the flag; the variable is "
        "comma-separated)",
        "KEY",
    ),
    Setting(
        "--max-deliveries",
        "HAREL_SA_MAX_DELIVERIES",
        _deliveries,
        DEFAULT_MAX_DELIVERIES,
        "dead-letter a message after N deliveries ('none': retry for ever)",
    ),
    Setting("--grace", "HAREL_SA_GRACE", _seconds, 10.0, "seconds in-flight handlers get", "S"),
    Setting("--poll-interval", "HAREL_SA_POLL_INTERVAL", _seconds, 0.1, "idle poll", "S"),
    Setting(
        "--batch",
        "HAREL_SA_BATCH",
        lambda t: _whole(t, 1),
        1,
        "claim and ack up to N messages a commit (with --concurrency above 1; 1: off)",
    ),
    Setting(
        "--ack-wait",
        "HAREL_SA_ACK_WAIT",
        _seconds,
        DEFAULT_ACK_WAIT,
        "with --batch: how long an ack waits for others to share its commit (0: none)",
        "S",
    ),
    Setting(
        "--periodic",
        "HAREL_SA_PERIODIC",
        lambda t: [k.strip() for k in t.split(",") if k.strip()],
        None,
        "publish the harel_sa.Periodic schedules MODULE:ATTR names (a list of them, or one; "
        "repeat the flag; the variable is comma-separated)",
        "MODULE:ATTR",
    ),
    Setting("--log-level", "HAREL_SA_LOG_LEVEL", _choice(logs.LEVELS), "INFO", "log level", "L"),
    Setting("--log-format", "HAREL_SA_LOG_FORMAT", _choice(logs.FORMATS), "text", "text|json", "F"),
    Setting(
        "--metrics-port",
        "HAREL_SA_METRICS_PORT",
        lambda t: _whole(t, 0, 65535),
        None,
        "serve Prometheus metrics on this port (needs harel-sa[metrics]; 0: any free port)",
    ),
    Setting("--metrics-host", "HAREL_SA_METRICS_HOST", str, "0.0.0.0", "metrics address", "HOST"),
)


def register(commands: Commands) -> None:
    p = commands.add_parser(
        "worker",
        help="run a handler (MODULE:CALLABLE) on the queue until SIGTERM/SIGINT",
        description="Import CALLABLE from MODULE (the current directory is on the path) and "
        "run it on every message: a plain function on threads, an async def on asyncio. It "
        "returns: acked; raises harel_sa.Retry(delay) or harel_sa.DeadLetter(reason): as "
        "asked; raises anything else: retried with a growing delay, dead-lettered after "
        "--max-deliveries. Every option can also be set with the environment variable named "
        "in its help; the flag wins. SIGTERM or SIGINT stops it cleanly (exit 0). Exit codes: "
        "2 bad import path or option, 3 database not at head.",
    )
    p.add_argument("handler", metavar="MODULE:CALLABLE", help="e.g. myapp.jobs:handle")
    for s in SETTINGS:
        default = "" if s.default is None else f"; default {s.default}"
        p.add_argument(
            s.flag,
            dest=s.dest,
            metavar=s.metavar,
            type=s.parse,
            action="append" if s.flag in ("--routing-key", "--periodic") else "store",
            default=None,
            help=f"{s.help} (env {s.env}{default})",
        )
    p.add_argument(
        "--until-empty", action="store_true", help="stop once a claim finds nothing to do"
    )
    p.add_argument(
        "--max-messages", metavar="N", type=lambda t: _whole(t, 1), help="stop after N messages"
    )
    p.set_defaults(func=cmd_worker)


def settings(args: argparse.Namespace, environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Each setting from its flag, else its environment variable, else its default."""
    env = os.environ if environ is None else environ
    given = {s.dest: getattr(args, s.dest) for s in SETTINGS}
    for repeated in ("routing_key", "periodic"):  # repeated flags: a list of lists
        if given[repeated] is not None:
            given[repeated] = [k for keys in given[repeated] for k in keys]
    flag_db = given["db"] is not None or given["url"] is not None
    values: dict[str, Any] = {}
    for s in SETTINGS:
        value = given[s.dest]
        raw = env.get(s.env, "")
        if value is None and raw and not (flag_db and s.dest in ("db", "url")):
            try:
                value = s.parse(raw)
            except (argparse.ArgumentTypeError, ValueError) as exc:
                raise CliError(f"{s.env}={raw!r}: {exc}") from exc
        values[s.dest] = s.default if value is None else value
    if values["db"] is not None and values["url"] is not None:
        raise CliError("give one of --db and --url (or HAREL_SA_DB and HAREL_SA_URL), not both")
    return values


def load(path: str, debug: bool = False, what: str = "handler") -> Callable[..., Any]:
    """The callable ``MODULE:ATTR[.ATTR...]`` names, or a one-line usage error (``what`` is
    not ``"handler"``: the object, callable or not)."""
    form = "MODULE:CALLABLE" if what == "handler" else "MODULE:ATTR"
    module_name, sep, attr = path.partition(":")
    if not (sep and module_name and attr):
        raise CliError(f"the {what} must be given as {form}, not {path!r}")
    if module_name.endswith(".py") or "/" in module_name or "\\" in module_name:
        dotted = module_name.removesuffix(".py").strip("./\\").replace("/", ".")
        raise CliError(
            f"the {what} is {form}, a module name importable from here, not a file "
            f"path: {dotted}:{attr}, not {path!r}"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:
        if debug:
            raise
        raise CliError(f"cannot import {module_name}: {type(exc).__name__}: {exc}") from exc
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise CliError(f"{module_name} has no {attr!r}") from None
    if what == "handler" and not callable(found):
        raise CliError(f"{path} is a {type(found).__name__}, not a callable")
    return found  # type: ignore[no-any-return]


def load_periodic(paths: list[str], debug: bool = False) -> list[Any]:
    """The :class:`~harel_sa.Periodic` schedules ``--periodic`` names, each ``MODULE:ATTR`` a
    list of them (or one), or a one-line usage error."""
    from harel_sa.periodic import Periodic

    found: list[Any] = []
    for path in paths:
        value = load(path, debug, what="--periodic schedule list")
        items = [value] if isinstance(value, Periodic) else value
        if isinstance(items, str | bytes) or not isinstance(items, list | tuple):
            raise CliError(
                f"--periodic {path} is a {type(value).__name__}, not a list of harel_sa.Periodic"
            )
        for item in items:
            if not isinstance(item, Periodic):
                raise CliError(
                    f"--periodic {path} holds a {type(item).__name__}, not a harel_sa.Periodic"
                )
        found += items
    return found


def load_event_type(path: str, debug: bool = False) -> type[Any]:
    """The pydantic model ``--event-type`` names (``MODULE:CLASS``), or a one-line usage
    error: the events are decoded with it, and one of another shape would be dead-lettered."""
    from pydantic import BaseModel

    found = load(path, debug, what="--event-type")
    if not (isinstance(found, type) and issubclass(found, BaseModel)):
        raise CliError(f"--event-type {path} is a {type(found).__name__}, not a pydantic model")
    return found


def cmd_worker(args: argparse.Namespace) -> int:
    from harel_sa.worker.options import check_handler, is_async

    given = settings(args)
    logs.configure(given["log_level"], given["log_format"])
    handler = load(args.handler, args.debug)
    try:
        check_handler(handler)
    except harel_sa.InvalidArgumentTypeError as exc:
        raise CliError(f"{args.handler}: {exc}") from None
    event_type = None if given["event_type"] is None else load_event_type(given["event_type"])
    t = queue_target(argparse.Namespace(**given), must_exist=True)
    if t.path is not None and given["pooler"] != "auto":
        raise CliError("--pooler is for a postgresql:// --url, not for a SQLite file")
    options: dict[str, Any] = {
        "concurrency": given["concurrency"],
        "visibility": given["visibility"],
        "min_priority": given["min_priority"],
        "routing_keys": given["routing_key"] or None,
        "max_deliveries": None if given["max_deliveries"] == "none" else given["max_deliveries"],
        "grace": given["grace"],
        "poll_interval": given["poll_interval"],
        "batch": given["batch"],
        "ack_wait": given["ack_wait"],
    }
    if given["worker_id"] is not None:
        options["worker_id"] = given["worker_id"]
    if given["periodic"]:
        options["periodic"] = load_periodic(given["periodic"], args.debug)
    run = {"max_messages": args.max_messages, "until_empty": args.until_empty}
    with ExitStack() as stack:
        if given["metrics_port"] is not None:
            options["observer"] = _metrics(t, given, stack)
        if is_async(handler):
            log.info("handler %s is async: running an AsyncWorker", args.handler)
            import asyncio

            asyncio.run(_run_async(t, given["pooler"], handler, options, run, event_type))
        else:
            with open_queue(t, pooler=given["pooler"], event_type=event_type) as queue:
                harel_sa.Worker(queue, handler, **options).run(**run)
    return OK


async def _run_async(
    t: Target,
    pooler: Pooler,
    handler: Callable[..., Any],
    options: dict[str, Any],
    run: dict[str, Any],
    event_type: type[Any] | None,
) -> WorkerStats:
    from harel_sa.postgres.connect import is_postgresql

    queue: Any
    typed: dict[str, Any] = {} if event_type is None else {"event_type": event_type}
    if t.path is None and is_postgresql(t.api):
        from harel_sa import AsyncPostgresTransport  # needs the postgres extra

        queue = await AsyncPostgresTransport.create(
            t.api, prefix=t.prefix, create_schema=False, pooler=pooler, **typed
        )
    else:
        queue = await harel_sa.AsyncSqliteTransport.create(
            t.api, prefix=t.prefix, create_schema=False, **typed
        )
    try:
        return await harel_sa.AsyncWorker(queue, handler, **options).run(**run)
    finally:
        await queue.close()


def _metrics(t: Target, given: dict[str, Any], stack: ExitStack) -> Any:
    try:
        from prometheus_client import CollectorRegistry

        from harel_sa.metrics import QueueCollector, WorkerMetrics, serve
    except ModuleNotFoundError as exc:
        raise CliError(str(missing_extra("--metrics-port", "metrics", exc.name))) from exc
    registry = CollectorRegistry()
    observer = WorkerMetrics(registry)
    registry.register(QueueCollector(stack.enter_context(open_queue(t, pooler=given["pooler"]))))
    try:
        server = serve(given["metrics_port"], registry, given["metrics_host"])
    except OSError as exc:
        raise CliError(f"cannot serve metrics on port {given['metrics_port']}: {exc}") from exc
    stack.callback(server.server_close)
    stack.callback(server.shutdown)
    host, port = server.server_address[:2]
    log.info("serving metrics at http://%s:%s/metrics", host, port, extra={"port": port})
    return observer

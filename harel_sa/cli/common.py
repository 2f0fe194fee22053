"""What every ``harel-sa`` command shares: the database options, exit codes, output helpers.

Exit codes: 0 done; 1 the operation or a verification failed (or was declined); 2 bad usage
or input (arguments, a path or URL that is not a SQLite file); 3 the schema is not at head
(``harel-sa db upgrade`` fixes it); 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from harel_sa.cli.progress import isatty
from harel_sa.errors import SchemaError
from harel_sa.rules import DEFAULT_PREFIX, Pooler

# What a command runs on, imported when it runs: the parser (and ``--help``) needs none of it.
if TYPE_CHECKING:
    from harel_sa import SqliteTransport
    from harel_sa.revision_state import State

OK, FAILED, USAGE, SCHEMA, INTERRUPTED = 0, 1, 2, 3, 130

#: What ``add_subparsers`` returns; each command module registers its parsers on it.
Commands: TypeAlias = "argparse._SubParsersAction[Any]"


class CliError(Exception):
    """A failure the command reports as one line on stderr, exiting with ``code``."""

    def __init__(self, message: str, code: int = USAGE) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Target:
    """The database a command works on: what the API is given, and the file behind it."""

    api: str  # a path or a sqlite:/// URL, as the user gave it
    path: str | None  # the file, when it can be told (not for a ``uri=true`` URL)
    prefix: str
    is_url: bool = False

    @property
    def shown(self) -> str:
        """The database as messages, logs and JSON name it: a path as given, a URL with every
        credential masked (:func:`~harel_sa.redact.display`)."""
        from harel_sa.redact import display

        return display(self.api) if self.is_url else self.api

    @property
    def flag(self) -> str:
        """The option that names this database again, for the commands advice lines suggest
        (``--db x.db``). A URL is :attr:`shown`, its password as ``***``: such a line is then
        not runnable as printed, and that is the choice made, since a password in output
        reaches logs and terminals; put it back, or give it through libpq (``PGPASSWORD``,
        ``~/.pgpass``)."""
        return f"--url {self.shown}" if self.is_url else f"--db {self.api}"

    def open(self, *, read_only: bool = False, **kwargs: Any) -> SqliteTransport:
        """The transport, schema checked (not created) unless ``create_schema=True`` is given.

        Unless it creates the schema, the file is first read (read-only) and refused with the
        one-line :class:`~harel_sa.SchemaError` when it is not exactly this prefix's queue at
        head, before anything is opened for writing. ``read_only`` opens it ``mode=ro``: SQLite
        then writes nothing, creates no file and leaves the journal mode alone.
        """
        kwargs.setdefault("create_schema", False)
        if not kwargs["create_schema"]:
            self.require_queue()
        from harel_sa import SqliteTransport
        from harel_sa.sqlite.connection import read_only_url

        where = read_only_url(self.api) if read_only else self.api
        return SqliteTransport(where, prefix=self.prefix, **kwargs)

    def require_queue(self, version_table: str | None = None) -> State:
        """This prefix's :class:`~harel_sa.revision_state.State`, read-only; ``SchemaError``
        unless ok."""
        from harel_sa.sqlite.startup import read_target

        found = read_target(self.api, prefix=self.prefix, version_table=version_table)
        problem = found.problem(self.flag)
        if problem is not None:
            raise SchemaError(problem)
        return found


def add_db_options(parser: argparse.ArgumentParser, *, default_db: str | None = None) -> None:
    """``--db PATH`` | ``--url URL`` and ``--prefix`` (every database command has them)."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--db",
        metavar="PATH",
        default=default_db,
        help="the SQLite file" + (f" (default: {default_db})" if default_db else ""),
    )
    where.add_argument(
        "--url", metavar="URL", help="the database as a sqlite:///PATH or postgresql://... URL"
    )
    add_prefix_option(parser)


def add_prefix_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prefix", default=DEFAULT_PREFIX, help="the table prefix (default: %(default)s)"
    )


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def target(args: argparse.Namespace, *, must_exist: bool) -> Target:
    """The database of ``--db``/``--url``, checked before anything opens it.

    ``must_exist`` commands never create a file: a missing one is a usage error (2) that
    says how to make it. Any other bad path or URL is a usage error too.
    """
    checked = prefix(args.prefix)
    if args.url:
        api, path = args.url, _url_path(args.url)
    elif args.db:
        api = path = args.db
    else:
        raise CliError("no database: give --db PATH or --url sqlite:///PATH|postgresql://...")
    found = Target(api, path, checked, is_url=bool(args.url))
    if path is not None:
        _check_path(path, must_exist, found)
    return found


def queue_target(args: argparse.Namespace, *, must_exist: bool) -> Target:
    """:func:`target`, or a PostgreSQL database for a ``postgresql://`` ``--url`` (nothing on
    disk to check: the transport checks the schema when it opens)."""
    from harel_sa.postgres.connect import is_postgresql

    if is_postgresql(args.url):
        return Target(args.url, None, prefix(args.prefix), is_url=True)
    return target(args, must_exist=must_exist)


def open_queue(
    t: Target,
    *,
    create_schema: bool = False,
    pooler: Pooler = "auto",
    read_only: bool = False,
    event_type: type[Any] | None = None,
) -> Any:
    """The sync transport on ``t``: SQLite's (:meth:`Target.open`) or PostgreSQL's (through
    ``pooler``), its schema checked (or, with ``create_schema``, brought to head), its events
    decoded as ``event_type`` (``None``: :class:`~harel_sa.Event`). ``read_only``: SQLite's
    file opened ``mode=ro``, PostgreSQL's transactions read-only."""
    from harel_sa.postgres.connect import is_postgresql

    typed: dict[str, Any] = {} if event_type is None else {"event_type": event_type}
    if t.path is None and is_postgresql(t.api):
        from harel_sa import ConnectionLostError, PostgresTransport
        from harel_sa.postgres.connect import read_only as read_only_info

        def opened(where: object) -> Any:
            return PostgresTransport(
                where, prefix=t.prefix, create_schema=create_schema, pooler=pooler, **typed
            )

        if not read_only:
            return opened(t.api)
        try:
            return opened(read_only_info(t.api))
        except ConnectionLostError as exc:
            if "unsupported startup parameter: options" not in str(exc):
                raise
            return opened(t.api)  # PgBouncer refuses libpq's options: the role's settings hold
    if create_schema:
        return t.open(create_schema=True, **typed)
    return t.open(read_only=read_only, **typed)


@contextmanager
def server_errors(t: Target) -> Iterator[None]:
    """A PostgreSQL driver's error as one line: a server that cannot be reached (psycopg's
    ``OperationalError``) exits 1, "cannot connect"; any other, 2, "cannot read"."""
    try:
        yield
    except Exception as exc:
        if not type(exc).__module__.startswith("psycopg"):
            raise
        import psycopg

        if isinstance(exc, psycopg.OperationalError):
            raise CliError(f"cannot connect to {t.shown}: {exc}".strip(), FAILED) from exc
        raise CliError(f"cannot read {t.shown}: {exc}".strip(), USAGE) from exc


def prefix(value: str) -> str:
    """A valid table prefix, or a usage error."""
    from harel_sa.schema import Names

    try:
        return Names(value).prefix
    except ValueError as exc:
        raise CliError(str(exc)) from exc


def _url_path(url: str) -> str | None:
    # ``url`` may be a conninfo string or a URL with a password: messages show it masked.
    from sqlalchemy.exc import ArgumentError

    from harel_sa.redact import display
    from harel_sa.urls import parse

    try:
        parsed = parse(url)
    except (ArgumentError, ValueError) as exc:  # a bad port is a ValueError
        raise CliError(f"not a database URL: {display(url)!r}") from exc
    if parsed.drivername not in ("sqlite", "sqlite+pysqlite"):
        raise CliError(
            f"unknown database URL scheme {parsed.drivername!r}: use sqlite:///PATH or "
            "postgresql://..."
        )
    if not parsed.database or parsed.database == ":memory:":
        raise CliError(f"{display(url)!r} names no file: use sqlite:///PATH")
    return None if "uri" in parsed.query else parsed.database


def _check_path(path: str, must_exist: bool, t: Target) -> None:
    if os.path.isdir(path):
        raise CliError(f"{path} is a directory, not a database file")
    instance = os.path.join(os.path.dirname(path), "instance", os.path.basename(path))
    if not os.path.exists(path) and os.path.isfile(instance):
        # Flask-SQLAlchemy reads sqlite:///app.db as the app's instance folder's app.db.
        raise CliError(
            f"no such database file: {path}, but {instance} exists: Flask-SQLAlchemy keeps "
            f"`sqlite:///{os.path.basename(path)}` in the app's instance folder; "
            f"use --db {instance}"
        )
    if must_exist and not os.path.exists(path):
        raise CliError(
            f"no such database file: {path} "
            f"(create it with `harel-sa db upgrade {t.flag} --prefix {t.prefix}`)"
        )
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise CliError(f"cannot create {path}: directory {parent} does not exist")


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    """Print ``data`` as JSON with ``--json``, else ``text`` (both to stdout)."""
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, sort_keys=False))
    elif text:
        print(text)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], indent: str = "") -> str:
    """Aligned columns (numbers to the right); ``(none)`` stands for ``None``."""
    raw = [list(row) for row in rows]
    numeric = [
        any(row[i] is not None for row in raw)
        and all(isinstance(row[i], int | float) for row in raw if row[i] is not None)
        for i in range(len(headers))
    ]
    cells = [[_cell(v) for v in row] for row in raw]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = [headers, *cells]
    return "\n".join(
        indent
        + "  ".join(
            v.rjust(w) if numeric[i] and n else v.ljust(w)
            for i, (v, w) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for n, line in enumerate(lines)
    )


def _cell(value: object) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def ago(epoch: float | None, now: float | None = None) -> str:
    """``12.3s ago`` / ``in 4.0s`` relative to now; ``-`` for ``None``."""
    if epoch is None:
        return "-"
    delta = epoch - (time.time() if now is None else now)
    if abs(delta) >= 1e9:  # a park of 1e308 seconds prints as itself, not 309 digits
        return f"in {delta:.3g}s" if delta >= 0 else f"{-delta:.3g}s ago"
    return f"in {delta:.1f}s" if delta >= 0 else f"{-delta:.1f}s ago"


def confirm(question: str, yes: bool) -> bool:
    """``True`` with ``--yes``; else ask on stderr and read one answer from stdin.

    Only ``y`` or ``yes`` agrees; end of input (a closed or empty stdin) declines.
    """
    if yes:
        return True
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        answer = sys.stdin.readline() if sys.stdin is not None else ""
    except (OSError, ValueError):
        answer = ""
    if not (answer.endswith("\n") and isatty(sys.stdin)):
        print(file=sys.stderr)  # the answer was not echoed: end the question's line
    return answer.strip().lower() in ("y", "yes")

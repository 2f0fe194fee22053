"""The ``harel-sa`` command (also ``python -m harel_sa``): run, watch and operate a queue.

``main(argv)`` parses, runs one subcommand and returns its exit code (see
:mod:`harel_sa.cli.common`): every failure it expects ends as one line on stderr, never a
traceback (``--debug`` shows the traceback of an unexpected one).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from collections.abc import Sequence
from typing import NoReturn

from harel_sa.cli import db, demo, flow, queue, top, web, worker
from harel_sa.cli.common import FAILED, INTERRUPTED, SCHEMA, USAGE, CliError
from harel_sa.errors import (
    HarelSAError,
    InvalidArgumentError,
    NotADatabaseError,
    SchemaError,
)
from harel_sa.lazy import missing_extra

__all__ = ["main", "parser"]

#: The driver each extra installs: its absence is a usage error that names the extra.
_EXTRAS = {"psycopg": "postgres", "psycopg_pool": "postgres", "prometheus_client": "metrics"}
_EXTRAS |= {"starlette": "web", "uvicorn": "web", "jinja2": "web"}


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (and exit 2), pointing at ``--help``."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _Version(argparse.Action):
    """``--version``, read from the package's metadata only when asked for."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        from harel_sa import __version__

        print(f"harel-sa {__version__}")  # on stdout, as argparse's own version action
        parser.exit()


def parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="harel-sa",
        description="A durable one-host message queue on SQLite: run the demo, migrate, "
        "inspect and operate a queue. Exit codes: 0 ok, 1 failed or declined, 2 bad usage "
        "or input, 3 schema not at head (run `harel-sa db upgrade`).",
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    demo.register(commands)
    db.register(commands)
    queue.register(commands)
    flow.register(commands)
    worker.register(commands)
    top.register(commands)
    web.register(commands)
    _everywhere(parser, top_level=True)
    return parser


def _everywhere(parser: argparse.ArgumentParser, *, top_level: bool = False) -> None:
    """``--debug`` before or after any subcommand (a subcommand's copy does not reset it)."""
    parser.add_argument(
        "--debug",
        action="store_true",
        default=False if top_level else argparse.SUPPRESS,
        help="show the traceback of an unexpected error",
    )
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _everywhere(sub)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``harel-sa`` with ``argv`` (default: the process's); return the exit code."""
    args = parser().parse_args(argv)
    try:
        code: int = args.func(args)
        sys.stdout.flush()
        return code
    except CliError as exc:
        return _fail(exc.code, str(exc))
    except SchemaError as exc:
        return _fail(SCHEMA, str(exc))
    except (InvalidArgumentError, NotADatabaseError) as exc:
        return _fail(USAGE, str(exc))
    except HarelSAError as exc:
        return _fail(FAILED, str(exc))
    except KeyboardInterrupt:
        return _fail(INTERRUPTED, "interrupted")
    except BrokenPipeError:
        # The reader went away (``| head``): say nothing more, and let exit not complain.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return FAILED
    except ModuleNotFoundError as exc:
        extra = _EXTRAS.get((exc.name or "").partition(".")[0])
        if extra is None:
            if args.debug:
                raise
            return _fail(FAILED, f"unexpected {type(exc).__name__}: {exc} (--debug shows more)")
        if "pip install" not in str(exc):
            exc = missing_extra(f"harel-sa {args.command}", extra, exc.name)
        return _fail(USAGE, str(exc))
    except Exception as exc:
        if _from_sqlalchemy(exc):
            orig = getattr(exc, "orig", None)
            if isinstance(orig, sqlite3.DatabaseError):
                notadb = getattr(orig, "sqlite_errorname", "") == "SQLITE_NOTADB"
                return _fail(USAGE if notadb else FAILED, f"{orig}")
            return _fail(FAILED, f"{type(exc).__name__}: {exc}")
        if args.debug:
            raise
        return _fail(FAILED, f"unexpected {type(exc).__name__}: {exc} (--debug shows more)")


def _from_sqlalchemy(exc: Exception) -> bool:
    """Whether ``exc`` is SQLAlchemy's (only a command that imported it can raise one: the
    parser does not import it)."""
    errors = sys.modules.get("sqlalchemy.exc")
    return errors is not None and isinstance(exc, errors.SQLAlchemyError)


def _fail(code: int, message: str) -> int:
    print(f"harel-sa: {' '.join(message.split())}", file=sys.stderr)
    return code

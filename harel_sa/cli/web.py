"""``harel-sa web``: serve a page of the queue (the ``web`` extra), on loopback by default.

It reads as ``stats`` does (read-only); with ``--allow-writes`` and a token (the
``HAREL_SA_WEB_TOKEN`` variable or ``--token-file``) the page may also requeue, release and
purge, each behind a confirmation where the operator gives the token. The token is never
printed, logged or put in a page or URL; the database is shown with its password masked.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Callable, Sequence
from typing import Any

from harel_sa.cli.common import (
    FAILED,
    OK,
    CliError,
    Commands,
    Target,
    add_db_options,
    open_queue,
    queue_target,
)

TOKEN_VARIABLE = "HAREL_SA_WEB_TOKEN"
#: The shortest token accepted: a guessable one would open the queue to any local program.
MIN_TOKEN = 16


def register(commands: Commands) -> None:
    p = commands.add_parser(
        "web",
        help="a web page of the queue (read-only unless --allow-writes and a token)",
        description="Serve a page of the queue: totals and rates, groups, leases by worker, "
        "dead letters. With --allow-writes and a token (HAREL_SA_WEB_TOKEN or --token-file) "
        "it may requeue and purge dead letters, release parks and purge a group, each "
        "confirmed with the token. Needs pip install 'harel-sa[web]'. Ctrl-C ends it.",
    )
    add_db_options(p)
    p.add_argument("--host", default="127.0.0.1", help="the address to bind (%(default)s)")
    p.add_argument(
        "--port", metavar="N", type=int, default=8642, help="default: 8642; 0: any free port"
    )
    p.add_argument(
        "--allow-host",
        metavar="NAME",
        action="append",
        default=[],
        help="also answer to this Host header (a name a proxy or browser uses; repeatable)",
    )
    p.add_argument("--allow-writes", action="store_true", help="offer the actions (token)")
    p.add_argument(
        "--token-file", metavar="PATH", help=f"the token's file (else ${TOKEN_VARIABLE})"
    )
    p.add_argument(
        "--refresh", metavar="S", type=int, default=5, help="reload every S seconds (5; 0: off)"
    )
    p.set_defaults(func=cmd_web)


def _token(args: argparse.Namespace) -> str | None:
    if args.token_file is not None:
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token: str | None = f.read().strip()
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            raise CliError(f"cannot read the token file {args.token_file}: {why}") from None
        except UnicodeDecodeError:  # its message would quote a byte of the token
            raise CliError(f"the token file {args.token_file} is not UTF-8 text") from None
    else:
        token = os.environ.get(TOKEN_VARIABLE, "").strip() or None
    if not args.allow_writes:
        return None
    if not token:
        raise CliError(
            f"--allow-writes needs a token: set {TOKEN_VARIABLE} or give --token-file PATH"
        )
    if len(token) < MIN_TOKEN:
        raise CliError(f"the token is too short: give one of at least {MIN_TOKEN} characters")
    return token


def _where(args: argparse.Namespace) -> Target:
    if args.db is None and args.url is None:
        args.url = os.environ.get("HAREL_SA_URL") or None
        args.db = os.environ.get("HAREL_SA_DB") or None
        if args.db is not None and args.url is not None:
            raise CliError("give one of HAREL_SA_DB and HAREL_SA_URL, not both")
    return queue_target(args, must_exist=True)


def redactor(api: str) -> Callable[[str], str]:
    """A function that masks the database ``api``'s passwords (``user:pw@``, ``?password=``,
    ``?sslpassword=``) wherever they appear in a text (an error the page or log shows)."""
    from sqlalchemy.exc import ArgumentError

    from harel_sa.redact import MASK
    from harel_sa.urls import parse

    secrets: list[str] = []
    try:
        url = parse(api) if "://" in api else None
    except (ArgumentError, ValueError):
        url = None
    if url is not None:
        secrets += [str(url.password)] if url.password else []
        for key, value in url.query.items():
            if key.lower() in ("password", "sslpassword"):
                secrets += [value] if isinstance(value, str) else list(value)

    def redact(text: str) -> str:

        for secret in sorted(filter(None, secrets), key=len, reverse=True):
            text = text.replace(secret, MASK)
        return text

    return redact


def cmd_web(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port must be from 0 to 65535, not {args.port}")
    if args.refresh < 0:
        raise CliError("--refresh must be 0 (off) or more seconds")
    token = _token(args)
    t = _where(args)
    import uvicorn  # the web extra: missing, it is a usage error naming the extra

    import harel_sa.web.app  # noqa: F401 - its packages too, before anything is opened

    open_queue(t, read_only=True).close()  # the schema checked (exit 3) before serving
    try:
        listening = socket.create_server(
            (args.host, args.port), family=_family(args.host), reuse_port=False
        )
    except OSError as exc:
        why = exc.strerror or exc
        raise CliError(f"cannot listen on {args.host}:{args.port}: {why}", FAILED) from None
    port = listening.getsockname()[1]
    app = app_for(t, (args.host, port), token, args.refresh, args.allow_host)
    shown = f"[{args.host}]" if ":" in args.host else args.host
    mode = "writes allowed with the token" if token else "read-only"
    print(f"harel-sa web: {t.shown} on http://{shown}:{port}/ ({mode})", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    try:
        uvicorn.Server(config).run(sockets=[listening])
    except KeyboardInterrupt:
        pass  # Ctrl-C: the way to stop it (Uvicorn raises it again once it has stopped)
    finally:
        listening.close()
    sys.stdout.flush()
    return OK


def app_for(
    t: Target,
    address: tuple[str, int],
    token: str | None,
    refresh: int = 5,
    hosts: Sequence[str] = (),
) -> Any:
    """The web app over the queue of ``t`` at ``address``, writes allowed with ``token``:
    read-only opens for the page, writable ones for the actions."""
    from harel_sa.web.app import create_app

    return create_app(
        open_read=lambda: open_queue(t, read_only=True),
        open_write=lambda: open_queue(t),
        title=f"{t.shown} (prefix {t.prefix})",
        address=address,
        token=token,
        hosts=hosts,
        refresh=refresh,
        redact=redactor(t.api),
    )


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET

"""``harel-sa pause``, ``resume`` and ``backoff``: flow control from the command line.

Each names a routing key (``--routing-key K``, or ``--no-routing-key`` for the messages
published without one) or a group (``--group G``); what is in force shows in ``stats``.
"""

from __future__ import annotations

import argparse
from typing import Any

from harel_sa.cli.common import (
    OK,
    Commands,
    add_db_options,
    add_json_option,
    emit,
    open_queue,
    queue_target,
)
from harel_sa.present.format import utc_time


def register(commands: Commands) -> None:
    for name, summary in (
        ("pause", "start nothing more of a routing key or a group, in every worker"),
        ("resume", "end the pause of a routing key or a group"),
    ):
        p = commands.add_parser(name, help=summary, description=summary + ".")
        add_db_options(p)
        _target(p, group=True)
        add_json_option(p)
        p.set_defaults(func=cmd_pause if name == "pause" else cmd_resume)
    p = commands.add_parser(
        "backoff",
        help="claim no message of a routing key for some seconds (an upstream's 429)",
        description="Claim no message of a routing key for SECONDS; a longer backoff running "
        "already is kept.",
    )
    add_db_options(p)
    _target(p, group=False)
    p.add_argument("--seconds", type=float, required=True, help="how long (at most a day)")
    add_json_option(p)
    p.set_defaults(func=cmd_backoff)


def _target(parser: argparse.ArgumentParser, *, group: bool) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--routing-key", metavar="K", help="the messages published with key K")
    which.add_argument(
        "--no-routing-key", action="store_true", help="the messages published without a key"
    )
    if group:
        which.add_argument("--group", metavar="G", help="the group G")


def _named(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    if getattr(args, "group", None) is not None:
        return {"group_id": args.group}, f"group {args.group}"
    if args.no_routing_key:
        return {"routing_key": None}, "the messages without a routing key"
    return {"routing_key": args.routing_key}, f"routing key {args.routing_key}"


def cmd_pause(args: argparse.Namespace) -> int:
    named, what = _named(args)
    with open_queue(queue_target(args, must_exist=True)) as q:
        fresh = q.pause(**named)
    emit(
        args,
        {"paused": True, "was_paused": not fresh},
        f"paused {what}" + ("" if fresh else " (it was paused already)"),
    )
    return OK


def cmd_resume(args: argparse.Namespace) -> int:
    named, what = _named(args)
    with open_queue(queue_target(args, must_exist=True)) as q:
        was = q.resume(**named)
    emit(args, {"resumed": was}, f"resumed {what}" if was else f"{what} was not paused")
    return OK


def cmd_backoff(args: argparse.Namespace) -> int:
    named, what = _named(args)
    with open_queue(queue_target(args, must_exist=True)) as q:
        until = q.backoff(named["routing_key"], args.seconds)
    emit(args, {"backoff_until": until}, f"{what}: no claim until {utc_time(until)}")
    return OK

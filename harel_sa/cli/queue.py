"""``harel-sa stats | peek | release | purge | dead``: see and operate a queue.

Each opens the transport with ``create_schema=False``: they never create or migrate anything,
and a file that is not this prefix's queue at head fails with the one-line ``SchemaError``
(exit 3) before anything is written. ``stats``, ``peek`` and ``dead list`` only read: a
SQLite file opened ``mode=ro`` (nothing written, not even the journal mode), PostgreSQL's
transactions read-only. A missing file is a usage error (exit 2); none is ever created. Every
command works on ``--db PATH``, ``--url sqlite:///PATH`` and ``--url postgresql://...``.
Deleting commands (``purge``, ``dead purge``) ask first unless ``--yes``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from harel_sa.cli.common import (
    FAILED,
    OK,
    CliError,
    Commands,
    add_db_options,
    add_json_option,
    ago,
    confirm,
    emit,
    open_queue,
    queue_target,
    table,
)
from harel_sa.present.format import (
    age,
    cleanup_rows,
    data_of,
    due_rows,
    event_json,
    kind_of,
    one_line,
    plural,
    shorten,
    target_words,
    utc_time,
)

if TYPE_CHECKING:
    from harel_sa.models import DeadMessage, QueuedMessage, Stats

_DATA_WIDTH = 40
_ERROR_WIDTH = 60
_COUNT_LIMIT = 10_000


def register(commands: Commands) -> None:
    _stats(commands)
    _peek(commands)
    _release(commands)
    _purge(commands)
    _dead(commands)


def _parser(commands: Commands, name: str, summary: str, details: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(name, help=summary, description=details)
    add_db_options(parser)
    return parser


def _stats(commands: Commands) -> None:
    p = _parser(
        commands,
        "stats",
        "messages, groups, in flight, parked, dead, oldest age, by priority and routing key",
        "One consistent snapshot of the queue under a prefix.",
    )
    add_json_option(p)
    p.set_defaults(func=cmd_stats)


def _peek(commands: Commands) -> None:
    p = _parser(
        commands,
        "peek",
        "the next messages of a group or of the queue, without claiming them",
        "The next messages (oldest first) with their state: ready, leased or parked; then "
        "the scheduled ones (until: their due time).",
    )
    p.add_argument("--group", metavar="G", help="only this group (default: the whole queue)")
    p.add_argument("--limit", metavar="N", type=int, default=10, help="at most N (default: 10)")
    p.add_argument("--full", action="store_true", help="print events whole, not shortened")
    add_json_option(p)
    p.set_defaults(func=cmd_peek)


def _release(commands: Commands) -> None:
    p = _parser(
        commands,
        "release",
        "end the park of parked messages now (of a group, or all)",
        "Parked messages (nacked with a delay) become deliverable at once. Leases held by "
        "workers are not touched.",
    )
    p.add_argument("--group", metavar="G", help="only this group (default: every group)")
    add_json_option(p)
    p.set_defaults(func=cmd_release)


def _purge(commands: Commands) -> None:
    p = _parser(
        commands,
        "purge",
        "delete every message of a group (asks first)",
        "Delete every message of group G, leased ones included (their workers' acks will "
        "return False). Asks for 'y' on stdin unless --yes; any other answer, or none, "
        "deletes nothing and exits 1.",
    )
    p.add_argument("--group", metavar="G", required=True, help="the group to empty")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask")
    add_json_option(p)
    p.set_defaults(func=cmd_purge)


def _dead(commands: Commands) -> None:
    dead = commands.add_parser(
        "dead",
        help="the dead letters: list, requeue, purge",
        description="Messages moved to the dead table (undecodable, or delivered "
        "max_deliveries times, or dead-lettered by a worker).",
    )
    sub = dead.add_subparsers(dest="dead_command", metavar="{list,requeue,purge}", required=True)
    for name, summary, func in (
        ("list", "the dead messages, oldest first", cmd_dead_list),
        ("requeue", "put dead messages back at the tail of their groups", cmd_dead_requeue),
        ("purge", "delete dead messages for good (asks first)", cmd_dead_purge),
    ):
        p = _parser(sub, name, summary, summary[0].upper() + summary[1:] + ".")
        p.add_argument("--group", metavar="G", help="only this group's")
        p.add_argument(
            "--seq", metavar="N", type=int, action="append", help="only this seq (repeatable)"
        )
        if name == "list":
            p.add_argument("--limit", metavar="N", type=int, default=100, help="default: 100")
            p.add_argument("--full", action="store_true", help="print errors and events whole")
        if name == "purge":
            p.add_argument("-y", "--yes", action="store_true", help="do not ask")
        add_json_option(p)
        p.set_defaults(func=func)


@contextmanager
def _opened(args: argparse.Namespace, *, read_only: bool = False) -> Iterator[Any]:
    transport = open_queue(queue_target(args, must_exist=True), read_only=read_only)
    try:
        yield transport
    finally:
        transport.close()


def cmd_stats(args: argparse.Namespace) -> int:
    with _opened(args, read_only=True) as q:
        stats = q.stats()
    emit(args, {**stats.model_dump(mode="json"), "now": utc_time(stats.now)}, _stats_text(stats))
    return OK


def _stats_text(s: Stats) -> str:
    head = table(
        ["", ""],
        [
            ("messages", s.messages),
            ("ready", s.ready),
            ("in flight", s.in_flight),
            ("parked", s.parked),
            ("dead", s.dead),
            ("scheduled", s.scheduled),
            *due_rows(s),
            ("groups", s.groups),
            ("oldest age", age(s.oldest_age)),
            ("oldest ready", age(s.oldest_ready_age)),
            *cleanup_rows(s.dead_rows, s.oldest_transaction_age),
        ],
    ).split("\n", 1)[1]
    priorities = table(
        ["priority", "groups", "messages"],
        [(b.priority, b.groups, b.messages) for b in s.by_priority],
        indent="  ",
    )
    keys = table(
        ["routing key", "groups", "messages"],
        [(b.routing_key, b.groups, b.messages) for b in s.by_routing_key],
        indent="  ",
    )
    holding = [
        *(
            ("paused", target_words(p.routing_key, p.group_id), f"since {utc_time(p.since)}")
            for p in s.paused
        ),
        *(
            ("backoff", target_words(k, None), f"until {utc_time(v.backoff_until)}")
            for k, v in s.limits.items()
        ),
    ]
    flow = "\n\nheld back\n" + table(["", "what", "when"], holding, indent="  ") if holding else ""
    return f"{head}\n\nby priority\n{priorities}\n\nby routing key\n{keys}{flow}"


def cmd_peek(args: argparse.Namespace) -> int:
    with _opened(args, read_only=True) as q:
        messages = q.peek(args.group, args.limit, scheduled=True)
        # A full page may hide more: count them (up to _COUNT_LIMIT), for the text's last line.
        more = 0
        if len(messages) == args.limit:
            more = len(q.peek(args.group, args.limit + _COUNT_LIMIT + 1, scheduled=True))
            more -= len(messages)
    keyed = any(m.key is not None for m in messages)  # a key column only when one has a key
    rows = [
        (
            m.seq,
            m.group_id,
            *((m.key or "-",) if keyed else ()),
            m.state,
            m.deliveries,
            ago(m.due_at if m.state == "scheduled" else m.lock_expiry)
            if m.state != "ready"
            else "-",
            (m.locked_by or "-").split("#", 1)[0] if m.state == "leased" else "-",
            kind_of(m.event),
            one_line(m.event) if args.full else shorten(data_of(m.event), _DATA_WIDTH),
        )
        for m in messages
    ]
    last = "event" if args.full else "data"
    head = ["seq", "group", *(["key"] if keyed else []), "state", "deliveries", "until"]
    text = table([*head, "worker", "kind", last], rows)
    if more:
        count = f"over {_COUNT_LIMIT:,}" if more > _COUNT_LIMIT else f"{more:,}"
        text += f"\n… and {count} more (--limit N shows more)"
    emit(args, [_queued_json(m) for m in messages], text if rows else "(no messages)")
    return OK


def _queued_json(m: QueuedMessage) -> dict[str, Any]:
    data = m.model_dump(mode="json")
    expiry = None if m.lock_expiry is None else utc_time(m.lock_expiry, millis=True)
    enqueued = None if m.enqueued_at is None else utc_time(m.enqueued_at, millis=True)
    due = None if m.due_at is None else utc_time(m.due_at, millis=True)
    at = {"lock_expiry": expiry, "enqueued_at": enqueued, "due_at": due}
    return {**data, **event_json(m.event), **at}


def _dead_json(d: DeadMessage) -> dict[str, Any]:
    data = d.model_dump(mode="json")
    return {**data, **event_json(d.event), "dead_at": utc_time(d.dead_at, millis=True)}


def cmd_release(args: argparse.Namespace) -> int:
    with _opened(args) as q:
        released = q.release(args.group)
    where = f" of group {args.group}" if args.group is not None else ""
    emit(args, {"released": released}, f"released {released} parked message(s){where}")
    return OK


def cmd_purge(args: argparse.Namespace) -> int:
    with _opened(args) as q:
        present = q.peek(args.group, _COUNT_LIMIT + 1, scheduled=True)
        if not present:
            emit(args, {"purged": 0}, f"group {args.group} has no messages: nothing to purge")
            return OK
        leased = sum(m.state == "leased" for m in present)
        count = f"{len(present)}" if len(present) <= _COUNT_LIMIT else f"over {_COUNT_LIMIT}"
        question = f"delete all {count} message(s) of group {args.group!r} ({leased} leased)?"
        if not confirm(question, args.yes):
            return _declined(args, "purged")
        purged = q.purge(args.group)
    emit(args, {"purged": purged}, f"purged {purged} message(s) of group {args.group}")
    return OK


def _declined(args: argparse.Namespace, key: str) -> int:
    emit(args, {key: 0, "declined": True}, "")
    print("harel-sa: not confirmed; nothing deleted (answer 'y', or pass --yes)", file=sys.stderr)
    return FAILED


def cmd_dead_list(args: argparse.Namespace) -> int:
    with _opened(args, read_only=True) as q:
        dead = q.dead(args.group, args.seq, args.limit)
    if args.full:
        text = "\n\n".join(_dead_block(d) for d in dead)
    else:
        rows = [
            (
                d.seq,
                d.group_id,
                d.deliveries,
                d.priority,
                d.routing_key,
                utc_time(d.dead_at),
                kind_of(d.event),
                shorten(d.error, _ERROR_WIDTH),
            )
            for d in dead
        ]
        headers = ["seq", "group", "deliveries", "priority", "routing key", "dead at", "kind"]
        text = table([*headers, "error"], rows)
    emit(args, [_dead_json(d) for d in dead], text if dead else "(no dead messages)")
    return OK


def _dead_block(d: DeadMessage) -> str:
    """A dead message whole: its error and its event, each line of them indented."""
    head = (
        f"seq {d.seq}  group {d.group_id}  deliveries {d.deliveries}  priority {d.priority}  "
        f"routing key {d.routing_key or '(none)'}  dead at {utc_time(d.dead_at)}"
    )
    error = d.error.strip().replace("\n", "\n         ")
    return f"{head}\n  error: {error}\n  event: {d.event}"


def _missing_seqs(q: Any, args: argparse.Namespace) -> None:
    """An explicit ``--seq`` must name dead messages (of ``--group``, if given): else exit 1,
    having changed nothing."""
    if not args.seq:
        return
    found = {d.seq for d in q.dead(args.group, args.seq, len(set(args.seq)))}
    missing = sorted(set(args.seq) - found)
    if missing:
        where = f" in group {args.group}" if args.group is not None else ""
        seqs = ", ".join(map(str, missing))
        raise CliError(
            f"no dead message with seq {seqs}{where}: nothing changed (see harel-sa dead list)",
            code=FAILED,
        )


def cmd_dead_requeue(args: argparse.Namespace) -> int:
    with _opened(args) as q:
        _missing_seqs(q, args)
        moved = q.requeue_dead(args.group, args.seq)
    emit(args, {"requeued": moved}, f"requeued {plural(moved, 'dead message')}")
    return OK


def cmd_dead_purge(args: argparse.Namespace) -> int:
    with _opened(args) as q:
        _missing_seqs(q, args)
        chosen = q.dead(args.group, args.seq, _COUNT_LIMIT + 1)
        if not chosen:
            emit(args, {"purged": 0}, "no dead messages match: nothing to purge")
            return OK
        count = f"{len(chosen)}" if len(chosen) <= _COUNT_LIMIT else f"over {_COUNT_LIMIT}"
        if not confirm(f"delete {count} dead message(s) for good?", args.yes):
            return _declined(args, "purged")
        purged = q.purge_dead(args.group, args.seq)
    emit(args, {"purged": purged}, f"purged {purged} dead message(s)")
    return OK

"""Group concurrency: max_in_flight on the groups, scheduled and dead tables.

Revision ID: harel_sa_0010
Revises: harel_sa_0009
Create Date: 2026-12-08

``max_in_flight`` is how many of a group's messages may be in flight at once (NULL: one, a
group's messages one at a time, as before), fixed by the publish that creates the group's row,
as ``priority`` is. The scheduled and dead rows carry it, so that a promotion or a requeue that
makes the group again keeps it. The previous release's workers and producers ignore the column
(they never write it: their groups are NULL, one at a time); this release's claims read it.
A nullable integer without a default: ``INTEGER`` on SQLite, ``BIGINT`` on PostgreSQL (as the
other counts: its ``INTEGER`` is 32 bits).

Online: on PostgreSQL each ``ADD COLUMN IF NOT EXISTS`` (nullable, no default) changes only
the catalog, under a brief ACCESS EXCLUSIVE lock; each runs alone, waiting at most
``LOCK_TIMEOUT`` for it and tried again until it gets it, so the workers' calls queued behind
it go on between tries. On SQLite each ``ADD COLUMN``, guarded by ``PRAGMA table_info``, is
one statement. Downgrading drops the columns: every group takes one message at a time again.

Frozen: this file spells its own SQL and guards (SQLite's and PostgreSQL's) and imports nothing
from harel_sa, so it does the same in every release; tests/migrations/golden/ holds its
``upgrade --sql`` output on each dialect.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

from alembic import context, op
from alembic.util import CommandError
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

revision: str = "harel_sa_0010"
down_revision: str | Sequence[str] | None = "harel_sa_0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _dialect() -> str:
    """``sqlite`` or ``postgresql``: online the connection's, offline the configured URL's."""
    return str(context.get_context().dialect.name)


def _prefix() -> str:
    """Config.attributes["harel_sa_prefix"], then -x prefix=, then the ini's harel_sa_prefix,
    else "harel"; SQLite names ignore case, so the prefix is lowercased."""
    config = context.config
    prefix = config.attributes.get("harel_sa_prefix")
    if prefix is None:
        prefix = context.get_x_argument(as_dictionary=True).get("prefix")
    if prefix is None:
        prefix = config.get_main_option("harel_sa_prefix")
    prefix = "harel" if prefix is None else str(prefix)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,29}", prefix):
        raise CommandError(f"harel_sa: prefix {prefix!r} must match [A-Za-z_][A-Za-z0-9_]{{0,29}}")
    return prefix.lower()


def _columns(table: str) -> set[str] | None:
    """The columns of ``table`` (empty when it does not exist); ``None`` offline (--sql), where
    nothing can be looked at and the guarded statements are printed unconditionally."""
    if context.is_offline_mode():
        return None
    rows = op.get_bind().exec_driver_sql(f"PRAGMA table_info({table})").fetchall()
    return {str(row[1]).lower() for row in rows}


def _refuse_a_bare_step_across_heads() -> None:
    """``downgrade -1`` in a host with two heads (its own and harel_sa's) may pick harel_sa's:
    refuse it, naming the branch-qualified commands."""
    if context.is_offline_mode():
        return
    migration = op.get_context()
    destination = str(migration.opts.get("destination_rev"))
    heads = sorted(migration.get_current_heads())
    if re.fullmatch(r"-\d+", destination) and len(heads) > 1:
        raise CommandError(
            f"harel_sa: `downgrade {destination}` with several heads ({', '.join(heads)}) "
            "would step back harel_sa's queue, not (only) your application; name the branch: "
            "`alembic downgrade app@-1` (your branch label) or `alembic downgrade harel_sa@-1`"
        )


#: PostgreSQL, online (:func:`_online`): the longest one statement waits for a lock (the
#: workers' calls queued behind it then go on), the longest it runs, and how long the revision
#: keeps trying before it gives up.
LOCK_TIMEOUT = "1s"
STATEMENT_TIMEOUT = "15min"
GIVE_UP_AFTER = 120.0
#: lock_not_available, deadlock_detected: the statement gave its locks back; try it again.
_TRY_AGAIN = ("55P03", "40P01")


def _online(*steps: str | tuple[str, ...]) -> None:
    """Run ``steps`` on PostgreSQL while workers and producers run: outside the migration's
    transaction, so no lock is held from one step to the next (a step is one statement, or a
    tuple of them run as one transaction). Each waits at most LOCK_TIMEOUT for a lock, then
    gives it back and is tried again after a growing pause, until GIVE_UP_AFTER seconds; an
    index a broken ``CONCURRENTLY`` build left invalid is dropped before it is built again, so
    an interrupted upgrade resumes. Offline (``--sql``), the statements in that order."""
    with op.get_context().autocommit_block():
        if context.is_offline_mode():
            op.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
            op.execute(f"SET statement_timeout = '{STATEMENT_TIMEOUT}'")
            for step in steps:
                for sql in _statements(step):
                    op.execute(sql)
            op.execute("RESET lock_timeout")
            op.execute("RESET statement_timeout")
            return
        bind = op.get_bind()
        saved = bind.execute(
            text("SELECT current_setting('lock_timeout'), current_setting('statement_timeout')")
        ).one()
        bind.exec_driver_sql(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
        bind.exec_driver_sql(f"SET statement_timeout = '{STATEMENT_TIMEOUT}'")
        try:
            for step in steps:
                _until_done(bind, step)
        finally:
            bind.execute(
                text(
                    "SELECT set_config('lock_timeout', :lock, false), "
                    "set_config('statement_timeout', :statement, false)"
                ),
                {"lock": saved[0], "statement": saved[1]},
            )


def _statements(step: str | tuple[str, ...]) -> tuple[str, ...]:
    return (step,) if isinstance(step, str) else ("BEGIN", *step, "COMMIT")


def _until_done(bind: Any, step: str | tuple[str, ...]) -> None:
    deadline = time.monotonic() + GIVE_UP_AFTER
    pause = 0.05
    while True:
        try:
            _drop_if_invalid(bind, step)
            for sql in _statements(step):
                bind.exec_driver_sql(sql)
            return
        except DBAPIError as exc:
            if not isinstance(step, str):
                bind.exec_driver_sql("ROLLBACK")
            code = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
            if code not in _TRY_AGAIN:
                raise
            if time.monotonic() + pause > deadline:
                raise CommandError(
                    f"harel_sa: {revision} gave up after {GIVE_UP_AFTER:.0f} s: another session "
                    f"kept a lock it needs (look for long or idle transactions in "
                    f"pg_stat_activity), so it waited {LOCK_TIMEOUT} at a time and let the "
                    f"queue go on between; what it did so far stays, and running the upgrade "
                    f"again resumes it. Waiting on: {_statements(step)[-1][:120]}"
                ) from exc
        time.sleep(pause)
        pause = min(pause * 2, 2.0)


def _drop_if_invalid(bind: Any, step: str | tuple[str, ...]) -> None:
    """A ``CREATE INDEX CONCURRENTLY`` that failed or was killed leaves its index invalid
    (present, never used): drop it, so the build is made again, not skipped as existing."""
    words = step.split() if isinstance(step, str) else []
    if words[:3] != ["CREATE", "INDEX", "CONCURRENTLY"]:
        return
    name = words[6]
    invalid = bind.execute(
        text(
            "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = :name AND NOT i.indisvalid "
            "AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())"
        ),
        {"name": name},
    ).scalar()
    if invalid:
        bind.exec_driver_sql(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


#: The tables that carry a group's max_in_flight: its row, and the scheduled and dead rows
#: that make it again.
_TABLES = ("transport_groups", "transport_scheduled", "transport_dead")


def upgrade() -> None:
    p = _prefix()
    if _dialect() == "postgresql":
        _online(
            *(
                f"ALTER TABLE {p}_{table} ADD COLUMN IF NOT EXISTS max_in_flight BIGINT"
                for table in _TABLES
            )
        )
        return
    for table in _TABLES:
        present = _columns(f"{p}_{table}")
        if present is None or "max_in_flight" not in present:
            op.execute(f"ALTER TABLE {p}_{table} ADD COLUMN max_in_flight INTEGER")


def downgrade() -> None:
    # Only the limits go (the older schema has no place for them); every row stays.
    p = _prefix()
    _refuse_a_bare_step_across_heads()
    if _dialect() == "postgresql":
        _online(
            *(
                f"ALTER TABLE {p}_{table} DROP COLUMN IF EXISTS max_in_flight"
                for table in reversed(_TABLES)
            )
        )
        return
    for table in reversed(_TABLES):
        present = _columns(f"{p}_{table}")
        if present is None or "max_in_flight" in present:
            op.execute(f"ALTER TABLE {p}_{table} DROP COLUMN max_in_flight")

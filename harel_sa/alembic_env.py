"""harel_sa's own Alembic environment (standalone mode): the body of ``migrations/env.py``.

It runs harel_sa's revisions on one prefix, records the revision in the prefix's own version
table (``<prefix>_transport_alembic_version``) and, online, makes the whole run one
transaction: ``BEGIN IMMEDIATE`` on SQLite; on PostgreSQL (transactional DDL) one transaction
holding an advisory lock on the prefix, so concurrent upgrades serialize. It refuses to work on
a prefix whose revision the host's Alembic history keeps (that would start a second record: see
:mod:`harel_sa.revision_state`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from logging.config import fileConfig
from typing import Any

from alembic.config import Config
from alembic.util import CommandError
from sqlalchemy import (
    URL,
    Column,
    Connection,
    Engine,
    Identity,
    Index,
    NullPool,
    create_engine,
    event,
)

from harel_sa.postgres.connect import CLIENT_ENCODING, is_postgresql, set_up
from harel_sa.postgres.startup import wait_for_turn
from harel_sa.revision_state import PIPELINE, read
from harel_sa.schema import DEFAULT_PREFIX, Names, metadata, migration_lock, on_dialect
from harel_sa.sqlite.connection import sqlite_url
from harel_sa.urls import parse

PREFIX_OPTION = "harel_sa_prefix"
#: ``Config.attributes`` key the revisions read: a downgrade that destroys rows goes on.
FORCE_OPTION = "harel_sa_force"
_MIGRATION_BUSY_TIMEOUT_MS = 60_000


def prefix_of(config: Config | None) -> str:
    """The prefix the revisions act on: attribute, then ``-x prefix=``, then ini, then default.

    The revisions read it the same way (each spells that rule itself). A prefix given empty or
    malformed raises :class:`~harel_sa.InvalidArgumentError`: it never falls back to the default.
    """
    if config is None:
        return DEFAULT_PREFIX
    prefix = config.attributes.get(PREFIX_OPTION)
    if prefix is None:
        for arg in getattr(config.cmd_opts, "x", None) or ():
            key, _, value = str(arg).partition("=")
            if key == "prefix":
                prefix = value
    if prefix is None:
        prefix = config.get_main_option(PREFIX_OPTION)
    return Names(DEFAULT_PREFIX if prefix is None else prefix).prefix


def only_harel_sa(prefix: str) -> Callable[[str | None, str, Any], bool]:
    """The autogenerate filter of harel_sa's own environment: only ``prefix``'s tables."""
    tables = set(Names(prefix).tables)

    def include(name: str | None, type_: str, parent_names: Any) -> bool:
        return name in tables if type_ == "table" else True

    return include


def on_this_dialect(dialect: str) -> Callable[[Any, str | None, str, bool, Any], bool]:
    """The autogenerate ``include_object`` filter: the metadata's columns and indexes that
    ``dialect`` does not have (:func:`harel_sa.schema.on_dialect`) are not compared, nor (on
    PostgreSQL) a primary-key column declared nullable once the database has it."""

    def include(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
        if reflected or not isinstance(obj, Column | Index):
            return True
        if (
            dialect == "postgresql"
            and isinstance(obj, Column)
            and obj.primary_key
            and obj.nullable
            and compare_to is not None
        ):
            # groups.group_id is declared as SQLite has it (a TEXT primary key admits NULL
            # there); a PostgreSQL primary key is NOT NULL whatever the declaration, so the
            # one difference autogenerate would report cannot be made. The column exists.
            return False
        return on_dialect(obj, dialect)

    return include


def server_defaults(
    context: Any,
    inspected_column: Any,
    metadata_column: Any,
    inspected_default: str | None,
    metadata_default: Any,
    rendered_metadata_default: str | None,
) -> bool | None:
    """The autogenerate ``compare_server_default`` hook: on SQLite an identity column (``seq``)
    is the rowid (``INTEGER PRIMARY KEY AUTOINCREMENT``), which SQLite reports as no default;
    every other default is compared as Alembic compares it."""
    if context.dialect.name == "sqlite" and isinstance(metadata_column.server_default, Identity):
        return False
    return None


def sync_url(target: object) -> str:
    """The ``sqlite://`` (pysqlite) URL of ``target``: a path, a SQLite URL or an Engine.

    Migrations run on harel_sa's own synchronous engine, so ``sqlite+aiosqlite://`` is read as
    the same file through sqlite3.
    """
    url = sqlite_url(target.url if isinstance(target, Engine) else target)
    return url.set(drivername="sqlite").render_as_string(hide_password=False)


def migration_url(target: object) -> str:
    """The URL migrations run on: :func:`sync_url` for SQLite; for PostgreSQL the same database
    through psycopg 3 (``postgresql://`` and ``postgresql+psycopg://`` alike)."""
    if not is_postgresql(target):
        return sync_url(target)
    if isinstance(target, Engine):
        url = target.url
    else:
        url = target if isinstance(target, URL) else parse(str(target))
    return url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


def engine_for(url: str, *, busy_timeout_ms: int = _MIGRATION_BUSY_TIMEOUT_MS) -> Engine:
    """An engine whose transactions are real, so DDL is transactional and concurrent upgrades
    wait for each other.

    SQLite: SQLAlchemy's recipe (the driver opens no transaction of its own; each begin is
    ``BEGIN IMMEDIATE``, which takes the write lock). PostgreSQL's DDL is transactional as it
    is; the run takes an advisory lock instead (:func:`_run_online`), and waits for locks at
    most ``busy_timeout_ms``.
    """
    if is_postgresql(url):
        pg_engine = create_engine(
            migration_url(url),
            poolclass=NullPool,
            # Nothing prepared: a transaction pooler (PgBouncer) may lie between.
            connect_args={"client_encoding": CLIENT_ENCODING, "prepare_threshold": None},
        )

        @event.listens_for(pg_engine, "connect")
        def _set_up(dbapi_connection: Any, _record: Any) -> None:
            # Set, as the transports do, not libpq's ``options``: those would replace the
            # URL's or PGOPTIONS', where a search_path names the schema the queue lives in.
            dbapi_connection.autocommit = True
            set_up(dbapi_connection, busy_timeout_ms)  # nothing through a pooler
            dbapi_connection.autocommit = False

        return pg_engine
    engine = create_engine(sync_url(url), poolclass=NullPool)

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        dbapi_connection.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def run_env() -> None:
    """Run the revisions on the configured database.

    The database is, in order: a ``Connection`` or ``Engine`` in ``Config.attributes
    ["connection"]`` (the caller's, used as given: its transactions are the caller's), then
    ``-x url=...``, then ``sqlalchemy.url``. Otherwise harel_sa opens its own engine
    (:func:`engine_for`), and the whole run is one ``BEGIN IMMEDIATE`` transaction.
    Offline (``--sql``) the URL is optional and only chooses the dialect (SQLite by default;
    a ``postgresql://`` URL prints PostgreSQL's DDL).
    """
    from alembic import context

    cfg = context.config
    if (
        cfg.config_file_name is not None
        and cfg.file_config.has_section("loggers")
        and cfg.attributes.get("configure_logger", True)
    ):
        fileConfig(cfg.config_file_name, disable_existing_loggers=False)
    names = Names(prefix_of(cfg))
    cfg.attributes[PREFIX_OPTION] = names.prefix  # what the revisions read first
    url = context.get_x_argument(as_dictionary=True).get("url") or cfg.get_main_option(
        "sqlalchemy.url"
    )
    common: dict[str, Any] = {
        "version_table": names.version_table,
        "target_metadata": metadata(names.prefix),
        "include_name": only_harel_sa(names.prefix),
        "transactional_ddl": True,
    }
    if context.is_offline_mode():
        where: dict[str, Any] = {"url": migration_url(url)} if url else {"dialect_name": "sqlite"}
        dialect = "postgresql" if url and is_postgresql(url) else "sqlite"
        context.configure(literal_binds=True, **where, **common, **comparison(dialect))
        with context.begin_transaction():
            context.run_migrations()
        return
    given = cfg.attributes.get("connection")
    if isinstance(given, Connection):
        _run_online(given, names, common)
        return
    if isinstance(given, Engine):
        with given.connect() as conn:
            _run_online(conn, names, common)
        return
    if not url:
        raise SystemExit("harel_sa: no database; pass -x url=sqlite:///PATH")
    engine = engine_for(url)
    try:
        with engine.connect() as conn:
            _run_online(conn, names, common)
    finally:
        engine.dispose()


def _run_online(conn: Connection, names: Names, options: dict[str, Any]) -> None:
    from alembic import context

    raw = conn.connection.driver_connection
    if isinstance(raw, sqlite3.Connection) or conn.dialect.name == "postgresql":
        state = read(raw, names)
        if state.integrated and not any(r.own for r in state.records):
            host = state.records[0]
            raise CommandError(
                f"harel_sa: prefix {names.prefix!r}'s revision is kept by your Alembic history "
                f"({host.describe()}): run {PIPELINE} / `alembic downgrade harel_sa@-1` in "
                "your project; harel_sa's own history would start a second record"
            )
    postgresql = conn.dialect.name == "postgresql"
    # SQLite: the whole run is one transaction (all or nothing; each revision is short).
    # PostgreSQL: a transaction per revision, since its steps run outside one (CONCURRENTLY).
    context.configure(
        connection=conn,
        transaction_per_migration=postgresql,
        **options,
        **comparison(conn.dialect.name),
    )
    if not postgresql:
        with context.begin_transaction():
            context.run_migrations()
        return
    # Concurrent upgrades of one prefix (processes starting together) take turns, for the
    # whole run: a session lock, since the revisions commit along the way. The next one then
    # reads the revisions this one recorded.
    lock = migration_lock(names)

    def try_lock() -> bool:
        taken = bool(conn.exec_driver_sql("SELECT pg_try_advisory_lock(%s)", (lock,)).scalar())
        conn.commit()
        return taken

    if raw is not None:
        raw.commit()  # the reading above: no transaction of ours is open while we wait
    wait_for_turn(try_lock)
    try:
        with context.begin_transaction():
            context.run_migrations()
    finally:
        if conn.in_transaction():
            conn.rollback()  # a run that failed: what it had not committed goes
        conn.exec_driver_sql("SELECT pg_advisory_unlock(%s)", (lock,))
        conn.commit()


def comparison(dialect: str) -> dict[str, Any]:
    """How autogenerate (``alembic check``) compares on ``dialect``: only what it has."""
    return {
        "include_object": on_this_dialect(dialect),
        "compare_server_default": server_defaults if dialect == "sqlite" else True,
    }

"""harel_sa's own Alembic environment (standalone mode): the body of ``migrations/env.py``.

It runs harel_sa's revisions on one prefix, records the revision in the prefix's own version
table (``<prefix>_transport_alembic_version``) and, online, makes the whole run one
``BEGIN IMMEDIATE`` transaction. It refuses to work on a prefix whose revision the host's
Alembic history keeps (that would start a second record: see :mod:`harel_sa.state`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from logging.config import fileConfig
from typing import Any

from alembic.config import Config
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, NullPool, create_engine, event

from harel_sa.schema import DEFAULT_PREFIX, Names, metadata
from harel_sa.sqlite.connection import sqlite_url
from harel_sa.state import read

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


def sync_url(target: object) -> str:
    """The ``sqlite://`` (pysqlite) URL of ``target``: a path, a SQLite URL or an Engine.

    Migrations run on harel_sa's own synchronous engine, so ``sqlite+aiosqlite://`` is read as
    the same file through sqlite3.
    """
    url = sqlite_url(target.url if isinstance(target, Engine) else target)
    return url.set(drivername="sqlite").render_as_string(hide_password=False)


def engine_for(url: str, *, busy_timeout_ms: int = _MIGRATION_BUSY_TIMEOUT_MS) -> Engine:
    """An engine whose transactions are real: each begins with ``BEGIN IMMEDIATE``.

    SQLAlchemy's recipe for SQLite: the driver opens no transaction of its own; each begin takes
    the write lock, so DDL is transactional and concurrent upgrades wait for each other.
    """
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
    Offline (``--sql``) the URL is optional: the DDL is SQLite's either way.
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
        where: dict[str, Any] = {"url": sync_url(url)} if url else {"dialect_name": "sqlite"}
        context.configure(literal_binds=True, **where, **common)
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
    if isinstance(raw, sqlite3.Connection):
        state = read(raw, names)
        if state.integrated and not any(r.own for r in state.records):
            host = state.records[0]
            raise CommandError(
                f"harel_sa: prefix {names.prefix!r}'s revision is kept by your Alembic history "
                f"({host.describe()}): run `alembic upgrade heads` / `alembic downgrade "
                "harel_sa@-1` in your project; harel_sa's own history would start a second record"
            )
    context.configure(connection=conn, **options)
    with context.begin_transaction():
        context.run_migrations()

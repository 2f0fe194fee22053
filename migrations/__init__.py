"""harel_sa's Alembic history, and the Python API over it (``harel_sa.migrations``).

The revisions live in ``versions/`` next to this file and ship inside the package, reachable as
the resource :data:`VERSION_LOCATION` or the path :func:`version_location`.

Two ways to run them:

- **Standalone** (harel_sa's own history): :func:`upgrade`, :func:`downgrade`, :func:`current`,
  :func:`check`, or ``alembic -x url=... -x prefix=... upgrade heads`` from the repository.
  Each prefix records its revision in a version table of its own
  (``<prefix>_transport_alembic_version``), so several prefixes share a file and move apart.
- **Integrated** (a host's history): the host adds :data:`VERSION_LOCATION` to its
  ``version_locations``, runs ``alembic upgrade heads``, and passes :func:`include_name` to
  ``context.configure`` so autogenerate leaves harel_sa's tables alone.

The prefix reaches the revisions from ``Config.attributes["harel_sa_prefix"]``, from
``-x prefix=NAME``, from the ini option ``harel_sa_prefix``, or is ``harel``. The recipe for
hosts, and every command of both modes, is in ``docs/alembic.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from logging.config import fileConfig
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, NullPool, create_engine, event

from harel_sa.connect import missing_file, sqlite_url
from harel_sa.schema import DEFAULT_PREFIX, Names

#: Where the revisions are, as a package resource for ``version_locations``.
VERSION_LOCATION = "harel_sa:migrations/versions"
#: The branch label of harel_sa's root revision.
BRANCH = "harel_sa"
PREFIX_OPTION = "harel_sa_prefix"

_HERE = Path(__file__).resolve().parent
_MIGRATION_BUSY_TIMEOUT_MS = 60_000


def version_location() -> str:
    """The filesystem path of the revisions (wheel and editable installs alike)."""
    return str(_HERE / "versions")


def script_location() -> str:
    """The filesystem path of harel_sa's Alembic environment (``env.py``)."""
    return str(_HERE)


def prefix_of(config: Config | None) -> str:
    """The prefix the revisions act on: attribute, then ``-x prefix=``, then ini, then default.

    A prefix given empty or malformed raises :class:`~harel_sa.InvalidArgumentError`: it never
    silently falls back to the default.
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


def revision_names() -> Names:
    """The :class:`Names` a running revision acts on (read from the running Config)."""
    from alembic import context

    return Names(prefix_of(context.config))


class OpRunner:
    """A :class:`~harel_sa.steps.Runner` over the running migration (online or ``--sql``)."""

    def __init__(self) -> None:
        from alembic import context, op

        self._offline = context.is_offline_mode()
        self._op = op

    def run(self, sql: str) -> None:
        self._op.execute(sql)

    def rows(self, sql: str) -> list[tuple[object, ...]] | None:
        if self._offline:
            return None
        return [tuple(row) for row in self._op.get_bind().exec_driver_sql(sql).fetchall()]


def include_name_for(
    prefix: str = DEFAULT_PREFIX, *more: str
) -> Callable[[str | None, str, Any], bool]:
    """An autogenerate ``include_name`` filter that leaves harel_sa's objects out.

    It covers ``prefix`` (and every prefix in ``more``): its tables, their columns, indexes and
    constraints, and the version table harel_sa's standalone mode keeps for it.
    """
    owned: set[str] = set()
    for each in (prefix, *more):
        names = Names(each)
        owned |= {*names.tables, names.version_table}

    def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
        if type_ == "table":
            return name not in owned
        if type_ in ("index", "column", "unique_constraint", "foreign_key_constraint"):
            return parent_names.get("table_name") not in owned
        return True

    return include_name


#: The host's filter for the default prefix: autogenerate neither drops nor re-creates
#: harel_sa's tables and indexes. Use :func:`include_name_for` for another prefix.
include_name = include_name_for(DEFAULT_PREFIX)


def only_harel_sa(prefix: str) -> Callable[[str | None, str, Any], bool]:
    """The inverse filter, for harel_sa's own environment: only ``prefix``'s tables."""
    tables = set(Names(prefix).tables)

    def include(name: str | None, type_: str, parent_names: Any) -> bool:
        return name in tables if type_ == "table" else True

    return include


def _sync_url(target: object) -> str:
    """The ``sqlite://`` (pysqlite) URL of ``target``: a path, a SQLite URL or an Engine.

    Migrations run on harel_sa's own synchronous engine, so ``sqlite+aiosqlite://`` is read as
    the same file through sqlite3.
    """
    url = sqlite_url(target.url if isinstance(target, Engine) else target)
    return url.set(drivername="sqlite").render_as_string(hide_password=False)


def config(target: object, *, prefix: str = DEFAULT_PREFIX) -> Config:
    """An Alembic :class:`Config` for harel_sa's own history on ``target`` (path, URL, Engine).

    An Engine is used for its URL only: the migration opens harel_sa's own engine
    (:func:`engine_for`) on the same file and installs nothing on the caller's.
    """
    cfg = Config()
    cfg.set_main_option("script_location", script_location())
    cfg.set_main_option("path_separator", "space")
    cfg.set_main_option("sqlalchemy.url", _sync_url(target))
    cfg.attributes[PREFIX_OPTION] = Names(prefix).prefix
    return cfg


def upgrade(target: object, *, prefix: str = DEFAULT_PREFIX, revision: str = "heads") -> None:
    """Bring ``prefix``'s tables on ``target`` to ``revision``, keeping every row.

    Works on an empty file, on one written by the original stdlib transport (with or without
    ``routing_key``, orphaned messages included) and on one created by a transport's start-up,
    without a manual ``stamp``. The whole upgrade is one ``BEGIN IMMEDIATE`` transaction: it
    applies completely or not at all, and concurrent upgrades serialize.
    """
    command.upgrade(config(target, prefix=prefix), revision)


def downgrade(target: object, revision: str, *, prefix: str = DEFAULT_PREFIX) -> None:
    """Step ``prefix``'s tables back to ``revision`` (``"-1"``, an id, or ``"base"``)."""
    command.downgrade(config(target, prefix=prefix), revision)


def sql(*, prefix: str = DEFAULT_PREFIX, revision: str = "heads") -> str:
    """The DDL of an upgrade from nothing to ``revision``, as a DBA would review it."""
    import io

    buffer = io.StringIO()
    cfg = config("offline.db", prefix=prefix)
    cfg.output_buffer = buffer
    command.upgrade(cfg, revision, sql=True)
    return buffer.getvalue()


def heads() -> tuple[str, ...]:
    """The head revision(s) of harel_sa's history."""
    script = ScriptDirectory(script_location())
    return tuple(script.get_heads())


def current(target: object, *, prefix: str = DEFAULT_PREFIX) -> tuple[str, ...]:
    """The revision(s) recorded for ``prefix`` on ``target``; empty when none is."""
    version_table = Names(prefix).version_table
    if missing_file(sqlite_url(_sync_url(target))) is not None:
        return ()  # nothing recorded, and no empty file left behind by looking
    with _reading(target) as conn:
        context = MigrationContext.configure(conn, opts={"version_table": version_table})
        return tuple(context.get_current_heads())


def check(target: object, *, prefix: str = DEFAULT_PREFIX) -> bool:
    """Whether ``prefix``'s tables on ``target`` are recorded at harel_sa's head."""
    return set(current(target, prefix=prefix)) == set(heads())


def engine_for(url: str, *, busy_timeout_ms: int = _MIGRATION_BUSY_TIMEOUT_MS) -> Engine:
    """An engine of harel_sa's own whose transactions are real: ``BEGIN IMMEDIATE`` ...

    SQLAlchemy's recipe for SQLite: the driver opens no transaction of its own; each begin takes
    the write lock, so DDL is transactional and concurrent upgrades wait for each other.
    """
    engine = create_engine(url, poolclass=NullPool)

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        dbapi_connection.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


@contextmanager
def _reading(target: object) -> Iterator[Connection]:
    """A connection that only reads: no ``BEGIN IMMEDIATE``, so no write lock is taken (and a
    read-only file can be checked)."""
    engine = create_engine(_sync_url(target), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def run_env() -> None:
    """The body of harel_sa's ``env.py``: run the revisions on the configured database.

    The database is, in order: a ``Connection`` or ``Engine`` in ``Config.attributes
    ["connection"]`` (the caller's, used as given: its transactions are the caller's), then
    ``-x url=...``, then ``sqlalchemy.url``. Otherwise harel_sa opens its own engine
    (:func:`engine_for`), and the whole run is one ``BEGIN IMMEDIATE`` transaction.
    Offline (``--sql``) the URL is optional: the DDL is SQLite's either way.
    """
    from alembic import context

    from harel_sa.schema import metadata

    cfg = context.config
    if (
        cfg.config_file_name is not None
        and cfg.file_config.has_section("loggers")
        and cfg.attributes.get("configure_logger", True)
    ):
        fileConfig(cfg.config_file_name, disable_existing_loggers=False)
    names = Names(prefix_of(cfg))
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
        where: dict[str, Any] = {"url": _sync_url(url)} if url else {"dialect_name": "sqlite"}
        context.configure(literal_binds=True, **where, **common)
        with context.begin_transaction():
            context.run_migrations()
        return
    given = cfg.attributes.get("connection")
    if isinstance(given, Connection):
        _run_online(given, common)
        return
    if isinstance(given, Engine):
        with given.connect() as conn:
            _run_online(conn, common)
        return
    if not url:
        raise SystemExit("harel_sa: no database; pass -x url=sqlite:///PATH")
    engine = engine_for(_sync_url(url))
    try:
        with engine.connect() as conn:
            _run_online(conn, common)
    finally:
        engine.dispose()


def _run_online(conn: Connection, options: dict[str, Any]) -> None:
    from alembic import context

    context.configure(connection=conn, **options)
    with context.begin_transaction():
        context.run_migrations()


__all__ = [
    "BRANCH",
    "VERSION_LOCATION",
    "OpRunner",
    "check",
    "config",
    "current",
    "downgrade",
    "engine_for",
    "heads",
    "include_name",
    "include_name_for",
    "only_harel_sa",
    "prefix_of",
    "revision_names",
    "run_env",
    "script_location",
    "sql",
    "upgrade",
    "version_location",
]

"""From a transport's ``target`` (path, URL or engine) to one SQLite driver connection.

The steps around a connection's life are written once here for both twins: what is checked
before connecting (:func:`check_target`) and what is undone before it is closed or given back
(:func:`end_use`). :class:`SyncConnection` performs them for the sync transport, the async
transport's driver (:mod:`harel_sa.sqlite.aio`) in aiosqlite's thread.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from sqlalchemy import URL, Connection, Engine, NullPool, create_engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from harel_sa.errors import (
    HarelSAError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    SchemaError,
)
from harel_sa.redact import display as display  # the name start-up and the async twin use
from harel_sa.sqlite.driver import storage_errors, translate
from harel_sa.sqlite.watch import Watch, abandon, refuse_inherited

#: SQLite's own URI parameters (https://sqlite.org/uri.html): given in a ``sqlite:///`` URL they
#: make it a ``file:`` URI, so SQLite, not only SQLAlchemy, sees them.
SQLITE_URI_PARAMETERS = frozenset({"mode", "cache", "immutable", "nolock", "vfs", "psow", "modeof"})


def sqlite_url(target: object) -> URL:
    """The SQLite URL a path, a ``sqlite:///`` URL string or a :class:`URL` designates.

    A URL that carries SQLite URI parameters (``?mode=ro``, ``&immutable=1``, ...) with or
    without ``uri=true`` comes back as a ``file:`` URI with ``uri=true``, so SQLite honours them
    (SQLAlchemy alone would drop them with a warning, or take ``q.db?mode=ro`` for a file name).
    """
    if isinstance(target, URL):
        url = target
    elif isinstance(target, str) and (target.startswith("sqlite") or "://" in target):
        try:
            url = make_url(target)
        except ArgumentError as exc:
            raise InvalidArgumentError(f"not a SQLite URL: {target!r} ({exc})") from exc
    elif isinstance(target, str | os.PathLike):
        path = os.fspath(target)
        if not isinstance(path, str) or not path:
            raise InvalidArgumentError(f"not a database path: {target!r}")
        url = URL.create("sqlite", database=path)
    else:
        raise InvalidArgumentTypeError(
            f"target must be a path, a sqlite:/// URL or an Engine, not {type(target).__name__}"
        )
    if url.get_backend_name() != "sqlite":
        raise InvalidArgumentError(f"harel_sa needs a SQLite database, not {url.drivername!r}")
    return _as_uri(url)


def _as_uri(url: URL) -> URL:
    database = url.database or ""
    params = {k: v for k, v in url.query.items() if k in SQLITE_URI_PARAMETERS}
    if database.startswith("file:"):
        return url.update_query_dict({"uri": "true"})  # else sqlite3 takes it for a file name
    asked = str(url.query.get("uri", "")).lower() == "true"
    if not (params or asked) or database in ("", ":memory:"):
        return url
    rest = {k: v for k, v in url.query.items() if k not in SQLITE_URI_PARAMETERS}
    file = "file:" + quote(os.path.abspath(database))
    return url.set(database=file, query={**rest, **params, "uri": "true"})


def file_of(url: URL) -> str | None:
    """The path of ``url``'s database file (``None`` in memory)."""
    database = url.database or ""
    if database.startswith("file:"):
        path = unquote(urlsplit(database).path)
        memory = "mode=memory" in database or path in ("", ":memory:")
        return None if memory else path
    return None if database in ("", ":memory:") else database


def read_only(url: URL) -> bool:
    """Whether ``url`` opens its database read-only (``mode=ro`` or ``immutable=1``)."""
    database = url.database or ""
    query = {**url.query, **dict(parse_qsl(urlsplit(database).query))}
    return database.startswith("file:") and (
        query.get("mode") == "ro" or query.get("immutable") == "1"
    )


def read_only_url(target: object) -> URL:
    """The same database as ``target``, opened ``mode=ro``: SQLite creates nothing and writes
    nothing through it (no journal-mode change either)."""
    url = sqlite_url(target)
    path = file_of(url)
    if path is None or read_only(url):
        return url
    return _as_uri(url.update_query_dict({"mode": "ro"}).set(database=path))


def connect_read_only(target: object) -> sqlite3.Connection:
    """A plain sqlite3 connection that can only read ``target`` (never creates the file)."""
    url = read_only_url(target)
    args, kwargs = driver_args(url, 5.0)
    with storage_errors():
        conn: sqlite3.Connection = sqlite3.connect(*args, **{**kwargs, "isolation_level": None})
    return conn


def missing_file(url: URL) -> str | None:
    """The path of ``url``'s database file when it names one that does not exist."""
    path = file_of(url)
    return None if path is None or os.path.exists(path) else path


def require_file(url: URL) -> None:
    """Refuse (before SQLite creates it) a database file that does not exist."""
    path = missing_file(url)
    if path is not None:
        raise SchemaError(
            f"no database at {path}: create it with `harel-sa db upgrade --url {display(url)}` "
            "(or `alembic upgrade heads`, `flask db upgrade heads` with Flask-Migrate, in your "
            "own pipeline), "
            "or open the transport with create_schema=True"
        )


def check_target(url: URL, create: bool) -> None:
    """Before connecting to ``url``: refuse a missing file unless ``create``, and a file this
    process inherited open across ``fork()`` (:func:`~harel_sa.sqlite.watch.refuse_inherited`)."""
    if not create:
        require_file(url)
    refuse_inherited(url.database)


def end_use(raw: sqlite3.Connection, borrowed: bool, prior_isolation: Any) -> None:
    """Before ``raw`` is closed or given back: roll back what is open, and give a ``borrowed``
    connection (checked out of the caller's engine) its isolation level back."""
    if raw.in_transaction:
        raw.execute("ROLLBACK")
    if borrowed:
        raw.isolation_level = prior_isolation


@dataclass
class SyncConnection:
    """A sqlite3 connection checked out of an engine for a transport's whole life.

    An engine the caller passed in stays theirs: no event hooks are installed on it, and the
    connection goes back to its pool with its isolation level as it was. Every operation runs
    under the connection's :class:`~harel_sa.sqlite.watch.Watch` (the process, the file, the log).
    """

    engine: Engine
    owned: bool
    handle: Connection
    raw: sqlite3.Connection
    prior_isolation: Any
    watch: Watch

    @classmethod
    def open(cls, target: object, busy_timeout: float, create: bool) -> SyncConnection:
        """Check out a connection; with ``create`` False a missing file is refused."""
        if isinstance(target, Engine):
            engine, owned = target, False
            if engine.dialect.name != "sqlite" or engine.dialect.driver != "pysqlite":
                raise InvalidArgumentError(
                    f"the Engine must use sqlite+pysqlite, not {engine.url.drivername!r}"
                )
        else:
            url = sqlite_url(target)
            if url.get_driver_name() not in ("pysqlite", ""):
                raise InvalidArgumentError(
                    f"SqliteTransport drives sqlite3 (sqlite:///), not {url.drivername!r}"
                )
            engine = create_engine(
                url,
                poolclass=NullPool,
                connect_args={"check_same_thread": False, "timeout": busy_timeout},
            )
            owned = True
        try:
            check_target(engine.url, create)
            handle = engine.connect()
        except BaseException as exc:
            if owned:
                engine.dispose()
            orig = exc.orig if isinstance(exc, DBAPIError) else None
            if isinstance(orig, sqlite3.DatabaseError):
                raise _at_open(translate(orig), engine.url) from exc
            raise
        raw: sqlite3.Connection = handle.connection.driver_connection  # type: ignore[assignment]
        return cls(engine, owned, handle, raw, raw.isolation_level, Watch(raw, busy_timeout))

    @property
    def where(self) -> str:
        return display(self.engine.url)

    def close(self) -> None:
        """Close (or give back) the connection; in a forked child, only let go of it."""
        if self.watch.forked:
            abandon(self)  # the parent's: closing it here could undo the parent's work
            return
        try:
            end_use(self.raw, not self.owned, self.prior_isolation)
            self.handle.close()
            if self.owned:
                self.engine.dispose()
        finally:
            self.watch.closed()


def _at_open(error: HarelSAError, url: URL) -> HarelSAError:
    return type(error)(f"cannot open {display(url)}: {error}")


def driver_args(url: URL, busy_timeout: float) -> tuple[list[Any], dict[str, Any]]:
    """The ``sqlite3.connect`` arguments for ``url``, as SQLAlchemy's pysqlite dialect reads it
    (``?mode=ro&uri=true`` and the like included)."""
    from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite

    args, kwargs = SQLiteDialect_pysqlite().create_connect_args(
        url.set(drivername="sqlite+pysqlite")
    )
    kwargs.setdefault("timeout", busy_timeout)
    return list(args), dict(kwargs)


def same_file(path: object, mine: str | None) -> bool:
    """Whether ``path`` (what a connection says its main file is) is ``mine``, a transport's;
    never for a database in memory."""
    if not path or not mine:
        return False
    try:
        return os.path.samefile(str(path), mine)
    except OSError:
        return False

"""From a transport's ``target`` (path, URL or engine) to one SQLite driver connection."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from typing import Any

from sqlalchemy import URL, Connection, Engine, NullPool, create_engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from harel_sa.errors import (
    HarelSAError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    SchemaError,
)
from harel_sa.operations import translate
from harel_sa.watch import Watch, abandon, refuse_inherited


def sqlite_url(target: object) -> URL:
    """The SQLite URL a path, a ``sqlite:///`` URL string or a :class:`URL` designates."""
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
    return url


def missing_file(url: URL) -> str | None:
    """The path of ``url``'s database file when it names one that does not exist."""
    database = url.database or ""
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return None if os.path.exists(database) else database


def require_file(url: URL) -> None:
    """Refuse (before SQLite creates it) a database file that does not exist."""
    path = missing_file(url)
    if path is not None:
        raise SchemaError(
            f"no database at {path}: create it with `harel-sa db upgrade --url {display(url)}` "
            "(or `alembic upgrade heads` in your own pipeline), "
            "or open the transport with create_schema=True"
        )


def display(url: URL) -> str:
    return url.render_as_string(hide_password=True)


@dataclass
class SyncConnection:
    """A sqlite3 connection checked out of an engine for a transport's whole life.

    An engine the caller passed in stays theirs: no event hooks are installed on it, and the
    connection goes back to its pool with its isolation level as it was. Every operation runs
    under the connection's :class:`~harel_sa.watch.Watch` (the process, the file, the log).
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
        if not create:
            require_file(engine.url)
        try:
            refuse_inherited(engine.url.database)
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
            if self.raw.in_transaction:
                self.raw.execute("ROLLBACK")
            if not self.owned:
                self.raw.isolation_level = self.prior_isolation
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

"""From a ``postgresql://`` URL (or a SQLAlchemy Engine on one) to psycopg connections."""

from __future__ import annotations

from typing import Any

from sqlalchemy import URL, Engine
from sqlalchemy.exc import ArgumentError

from harel_sa.errors import InvalidArgumentError, InvalidArgumentTypeError
from harel_sa.redact import display as display  # the name the transports and the CLI use
from harel_sa.revision_state import State, read
from harel_sa.rules import POOLERS as POOLERS
from harel_sa.rules import Pooler as Pooler
from harel_sa.schema import DEFAULT_PREFIX, Names
from harel_sa.urls import libpq_hosts, parse

#: The SQLAlchemy drivers whose URLs name a database psycopg can open as they are.
DRIVERS = ("", "psycopg", "psycopg2", "psycopg_async", "asyncpg", "pg8000")


#: The client encoding of every connection harel_sa opens, a startup parameter (so it wins
#: over the URL's options, PGCLIENTENCODING and the database's default): an event's JSON may
#: hold any character, and with SQL_ASCII psycopg reads texts as bytes.
CLIENT_ENCODING = "UTF8"


def checked_pooler(value: object) -> Pooler:
    """``value`` checked as a :data:`Pooler`."""
    if not isinstance(value, str):
        raise InvalidArgumentTypeError(f"pooler must be a str, not {type(value).__name__}")
    for known in POOLERS:
        if value == known:
            return known
    raise InvalidArgumentError(f"pooler must be one of {', '.join(POOLERS)}, not {value!r}")


def session_setup(lock_timeout_ms: int | None = None) -> str:
    """The statement each connection harel_sa opens runs first, whatever the URL's options,
    PGOPTIONS or the database's defaults say: its transactions READ COMMITTED (the claims'
    rules are built on it: under REPEATABLE READ or SERIALIZABLE, concurrent claims and acks
    fail with serialization errors), and with a ``lock_timeout_ms``, the longest wait for a
    lock. Not run through a pooler (:func:`set_up`)."""
    settings = [("default_transaction_isolation", "read committed")]
    if lock_timeout_ms is not None:
        settings.append(("lock_timeout", str(max(1, int(lock_timeout_ms)))))
    calls = ", ".join(f"set_config('{name}', '{value}', false)" for name, value in settings)
    return f"SELECT {calls}"


#: The backend's process id as the server names it: see :func:`direct`.
BACKEND_PID = "SELECT pg_backend_pid()"


def direct(row: tuple[Any, ...] | None, told_pid: int) -> bool:
    """Whether a connection reaches its server session directly: ``row`` is what
    :data:`BACKEND_PID` returned on it, ``told_pid`` the process id of the cancel key it got
    at its start (``conn.info.backend_pid``). A pooler (PgBouncer) answers the start with a
    key of its own."""
    return row is not None and row[0] == told_pid


def own_session(pooler: Pooler, row: tuple[Any, ...] | None, told_pid: int) -> bool:
    """Whether a connection's server session is its own: as ``pooler`` says (``"session"``:
    yes, ``"transaction"``: no) or, for ``"auto"``, as :func:`direct` finds (``row``: what
    :data:`BACKEND_PID` returned; asked only then)."""
    return direct(row, told_pid) if pooler == "auto" else pooler == "session"


def set_up(conn: Any, lock_timeout_ms: int | None = None, pooler: Pooler = "auto") -> bool:
    """Run :func:`session_setup` on ``conn`` (a sync psycopg connection, autocommit) when its
    server session is its own (:func:`own_session`); not through a transaction pooler, where
    the settings would stay on a server connection that serves other clients next. Whether
    it was."""
    row = conn.execute(BACKEND_PID).fetchone() if pooler == "auto" else None
    own = own_session(pooler, row, conn.info.backend_pid)
    if own:
        conn.execute(session_setup(lock_timeout_ms))
    return own


async def set_up_async(
    conn: Any, lock_timeout_ms: int | None = None, pooler: Pooler = "auto"
) -> bool:
    """:func:`set_up` on an async psycopg connection."""
    row = await (await conn.execute(BACKEND_PID)).fetchone() if pooler == "auto" else None
    own = own_session(pooler, row, conn.info.backend_pid)
    if own:
        await conn.execute(session_setup(lock_timeout_ms))
    return own


def is_postgresql(target: object) -> bool:
    """Whether ``target`` (a URL string, :class:`URL` or Engine) names a PostgreSQL database."""
    if isinstance(target, Engine):
        return target.dialect.name == "postgresql"
    if isinstance(target, URL) or (isinstance(target, str) and "://" in target):
        try:
            url = target if isinstance(target, URL) else parse(target)
        except (ArgumentError, ValueError):  # a bad port is a ValueError
            return False
        return url.get_backend_name() == "postgresql"
    return False


def postgres_url(target: object) -> URL:
    """The URL of ``target``: a ``postgresql://`` URL string, a :class:`URL` or an Engine."""
    if isinstance(target, Engine):
        url = target.url
    elif isinstance(target, URL):
        url = target
    elif isinstance(target, str):
        try:
            url = parse(target)
        except (ArgumentError, ValueError):  # a bad port is a ValueError
            # Named as display shows it (a conninfo string given here holds its password), and
            # without the parser's text, which quotes the string as given.
            raise InvalidArgumentError(
                f"not a database URL: {display(target)!r} (expected postgresql://...)"
            ) from None
    else:
        raise InvalidArgumentTypeError(
            f"target must be a postgresql:// URL or an Engine, not {type(target).__name__}"
        )
    if url.get_backend_name() != "postgresql" or url.get_driver_name() not in DRIVERS:
        raise InvalidArgumentError(
            f"harel_sa's PostgreSQL backend needs a postgresql:// URL, not {url.drivername!r}"
        )
    return url


def conninfo(target: object) -> str:
    """The libpq connection string of ``target`` (what ``psycopg.connect`` takes)."""
    from psycopg.conninfo import make_conninfo

    url = postgres_url(target)
    params: dict[str, Any] = {"user": url.username, "password": url.password}
    params["dbname"] = url.database
    for key, value in url.query.items():
        params[key] = value if isinstance(value, str) else value[-1]
    params.update(libpq_hosts(url))  # every host, in libpq's lists (a multi-host URL)
    params["client_encoding"] = CLIENT_ENCODING
    return make_conninfo("", **{k: v for k, v in params.items() if v is not None})


def read_only(target: object) -> URL:
    """The URL of ``target`` whose every transaction is read-only
    (``default_transaction_read_only``, added to the URL's own ``options``): what the commands
    that only look open, so they write nothing even as a role that may. A
    ``target_session_attrs=read-write`` (the primary of a multi-host URL) becomes ``primary``:
    the same server, which libpq's read-write check would refuse under that setting."""
    url = postgres_url(target)
    given = url.query.get("options") or ""
    options = given if isinstance(given, str) else " ".join(given)
    changed = {"options": f"{options} -c default_transaction_read_only=on".strip()}
    if url.query.get("target_session_attrs") == "read-write":
        changed["target_session_attrs"] = "primary"
    return url.update_query_dict(changed)


def read_state(
    target: object, *, prefix: str = DEFAULT_PREFIX, version_table: str | None = None
) -> State:
    """What :func:`harel_sa.revision_state.read` finds for ``prefix`` on ``target``, through a
    connection that can only read (``read_only``): nothing is written."""
    import psycopg

    names = Names(prefix)
    with psycopg.connect(conninfo(target), autocommit=True) as conn:
        set_up(conn)
        conn.read_only = True
        return read(conn, names, version_table)

"""A throw-away PostgreSQL server for the tests and the benchmarks (standard library only).

``HAREL_SA_PG_URL`` names a server to use as it is. Otherwise :func:`start` runs ``initdb`` into
a fresh temporary directory and ``pg_ctl start`` on a private Unix socket in that directory (no
TCP listener, so no port can clash), and :meth:`Cluster.stop` stops the server and removes the
directory. ``initdb`` refuses to run as root: as root, the server's programs run as the
``postgres`` user (``runuser``). A watchdog process stops the server and removes its directory
if the process that started it dies without calling :meth:`Cluster.stop` (a SIGKILLed pytest).

:meth:`Cluster.create_database` hands out fresh databases on either (they need psycopg; the
rest of this module is the standard library alone).

Run as a script (``python tests/pg_cluster.py``) it starts a cluster, prints its URL and keeps
it until Enter or Ctrl-C: a server to point ``psql`` or ``HAREL_SA_PG_URL`` at while working.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

URL_VARIABLE = "HAREL_SA_PG_URL"
BINDIR_VARIABLE = "HAREL_SA_PG_BINDIR"
INSTALL_HINT = (
    "PostgreSQL's server programs (initdb, pg_ctl) were not found: install the server "
    "(Debian/Ubuntu: apt-get install postgresql-15, or any postgresql-NN; elsewhere the "
    "distribution's PostgreSQL server package, with `pg_config --bindir` naming the folder of "
    f"initdb), set {BINDIR_VARIABLE} to that folder, or set {URL_VARIABLE}=postgresql://... "
    "to a server the tests may create databases on"
)
#: The port named in the socket's file name (``.s.PGSQL.<port>``); the socket lives in the
#: cluster's own directory, so every cluster can use the same one.
PORT = 5432
#: Settings every throw-away cluster gets: no TCP, durable commits (the defaults, said out loud
#: because the benchmarks' figures depend on them), room for many worker processes.
SETTINGS = {
    "listen_addresses": "''",
    "fsync": "on",
    "synchronous_commit": "on",
    "max_connections": "200",
}
LOG_TAIL = 40  # lines of the server's log quoted when it does not start


class Unavailable(RuntimeError):
    """No PostgreSQL server can be started here; the message says what to install."""


class StartError(RuntimeError):
    """The server's programs are here but the cluster did not start; the message quotes their
    output and the server's log."""


def bindir() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl``: ``HAREL_SA_PG_BINDIR`` when set, else
    ``pg_config --bindir``, else the PATH, else Debian's ``/usr/lib/postgresql/NN/bin``
    (newest first; a client-only ``pg_config`` names a folder without ``initdb``)."""
    forced = os.environ.get(BINDIR_VARIABLE)
    if forced:
        return Path(forced) if (Path(forced) / "initdb").exists() else None
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        found = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        folder = Path(found.stdout.strip())
        if found.returncode == 0 and (folder / "initdb").exists():
            return folder
    initdb = shutil.which("initdb")
    if initdb is not None:
        return Path(initdb).parent
    debian = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    return Path(debian[-1]).parent if debian else None


@dataclass
class Cluster:
    """A running server. ``url`` (``postgresql://``) names its ``postgres`` database, as the
    superuser ``postgres``. ``home`` is None for a server we were given: never ours to stop."""

    url: str
    home: Path | None = None
    bindir: Path | None = None
    user: str | None = None  # who runs the server's programs (None: this process's user)
    _watchdog: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _numbers: Iterator[int] = field(default_factory=itertools.count, repr=False)

    @property
    def data(self) -> Path:
        assert self.home is not None, "a server we were given has no data directory of ours"
        return self.home / "data"

    @property
    def log(self) -> Path:
        assert self.home is not None, "a server we were given has no log of ours"
        return self.home / "log"

    def url_for(self, database: str) -> str:
        """This server's URL with another database name."""
        return database_url(self.url, database)

    def execute(self, sql: str) -> None:
        """Run one statement on the maintenance database, in autocommit (``CREATE DATABASE``)."""
        import psycopg  # only the database helpers need it

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql)

    def create_database(self, prefix: str = "harel_sa_test") -> str:
        """A new empty database (a copy of ``template1``, a few tens of milliseconds), named
        ``<prefix>_<pid>_<n>`` so that sessions sharing a given server never collide; its URL."""
        name = f"{prefix}_{os.getpid()}_{next(self._numbers)}"
        self.execute(f'CREATE DATABASE "{name}"')
        return self.url_for(name)

    def drop_database(self, url: str) -> None:
        """Drop the database ``url`` names, closing any connection still open on it."""
        self.execute(f'DROP DATABASE IF EXISTS "{urlsplit(url).path.lstrip("/")}" WITH (FORCE)')

    def restart(self) -> None:
        """Stop the server (fast shutdown: every connection is closed) and start it again on
        the same socket and data; for tests of what clients do when the server goes away."""
        if self.home is None or self.bindir is None:
            raise RuntimeError(f"a server named by {URL_VARIABLE} is not ours to restart")
        _pg_ctl(self, "restart", "-m", "fast")

    def stop(self) -> None:
        """Stop the server and remove its directory (idempotent; nothing for a given server)."""
        if self.home is None or self.bindir is None:
            return
        _teardown(self.bindir, self.home, self.user)
        if self._watchdog is not None:
            with contextlib.suppress(OSError):
                self._watchdog.communicate(timeout=30)  # closes its pipe: it exits at once
            self._watchdog = None


def database_url(url: str, database: str) -> str:
    """``url`` naming ``database`` instead (a ``+driver`` suffix on the scheme is dropped)."""
    parts = urlsplit(url)
    return urlunsplit(("postgresql", parts.netloc, "/" + database, parts.query, ""))


def start(settings: dict[str, str] | None = None, port: int = PORT) -> Cluster:
    """The server of ``HAREL_SA_PG_URL``, or a new throw-away cluster (about a second).

    ``settings`` (``name: value`` as ``postgresql.conf`` spells them) are added to the new
    cluster's configuration; ``port`` names its socket (and its TCP port, if ``settings``
    open one). Raises :class:`Unavailable` when PostgreSQL is not installed (or
    cannot run here as root), :class:`StartError` when it is but the cluster does not start;
    nothing is left behind on failure.
    """
    given = os.environ.get(URL_VARIABLE)
    if given:
        return Cluster(database_url(given, urlsplit(given).path.lstrip("/") or "postgres"))
    folder = bindir()
    if folder is None:
        raise Unavailable(INSTALL_HINT)
    user = _server_user()
    home = Path(tempfile.mkdtemp(prefix="harel-sa-pg-", dir=_temp_root(user)))
    cluster = Cluster(
        f"postgresql://postgres@/postgres?host={home}&port={port}", home, folder, user
    )
    try:
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(home, entry.pw_uid, entry.pw_gid)
        _run(
            [folder / "initdb", "-A", "trust", "-U", "postgres", "-E", "UTF8", "-D", home / "data"],
            user,
            "initdb",
        )
        conf = {
            **SETTINGS,
            "unix_socket_directories": f"'{home}'",
            "port": str(port),
            **(settings or {}),
        }
        with (home / "data" / "postgresql.conf").open("a") as f:
            f.write("".join(f"{k} = {v}\n" for k, v in conf.items()))
        cluster._watchdog = _watch(folder, home, user)
        _pg_ctl(cluster, "start")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _server_user() -> str | None:
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise Unavailable(
            "running as root, and there is no `postgres` user to run initdb as (initdb refuses "
            "root): install PostgreSQL's server package, which creates it, or run as another "
            f"user; or set {URL_VARIABLE}"
        ) from None
    if shutil.which("runuser") is None:
        raise Unavailable(
            "running as root without `runuser` (util-linux) to run initdb as postgres"
        )
    return "postgres"


def _temp_root(user: str | None) -> str:
    """The temporary directory (``TMPDIR``), unless the socket's path would be too long there
    (Unix sockets allow about 100 bytes) or, as root, the ``postgres`` user cannot reach it:
    then ``/tmp``."""
    root = tempfile.gettempdir()
    if len(root) > 60 or (user is not None and not _reachable(Path(root))):
        return "/tmp"
    return root


def _reachable(folder: Path) -> bool:
    """Whether any user may pass through ``folder`` and each folder above it."""
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in (folder, *folder.parents))


def _run(argv: list[object], user: str | None, what: str) -> None:
    args = [str(a) for a in argv]
    if user is not None:
        args = ["runuser", "-u", user, "--", *args]
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise StartError(
            f"{what} failed (exit {done.returncode}): {' '.join(args)}\n{done.stdout}{done.stderr}"
        )


def _pg_ctl(cluster: Cluster, action: str, *extra: str) -> None:
    assert cluster.bindir is not None
    try:
        _run(
            [
                cluster.bindir / "pg_ctl",
                "-D",
                cluster.data,
                "-l",
                cluster.log,
                "-w",
                action,
                *extra,
            ],
            cluster.user,
            f"pg_ctl {action}",
        )
    except StartError as exc:
        raise StartError(
            f"{exc}\n--- the server's log ({cluster.log}) ---\n{_tail(cluster.log)}"
        ) from None


def _tail(log: Path) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-LOG_TAIL:])
    except OSError as exc:
        return f"(no log: {exc})"


def _teardown(folder: Path, home: Path, user: str | None) -> None:
    """Stop the server in ``home`` if one runs there (immediate: its data is thrown away), then
    remove ``home``."""
    if (home / "data" / "postmaster.pid").exists():
        args = [str(folder / "pg_ctl"), "-D", str(home / "data"), "-m", "immediate", "-w", "stop"]
        if user is not None:
            args = ["runuser", "-u", user, "--", *args]
        subprocess.run(args, capture_output=True)
    shutil.rmtree(home, ignore_errors=True)


def _watch(folder: Path, home: Path, user: str | None) -> subprocess.Popen[bytes]:
    """A process that tears the cluster down once this process's end of a pipe closes: at
    :meth:`Cluster.stop`, or when this process dies (a new session, so Ctrl-C spares it)."""
    argv = [sys.executable, __file__, "--watch", str(folder), str(home), user or ""]
    return subprocess.Popen(argv, stdin=subprocess.PIPE, start_new_session=True)


def _watchdog_main(folder: str, home: str, user: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.stdin.buffer.read()  # returns at EOF: the starter stopped the cluster, or died
    _teardown(Path(folder), Path(home), user or None)


def _serve() -> None:
    cluster = start()
    print(f"{cluster.url}\n(press Enter or Ctrl-C to stop it)", flush=True)
    try:
        with contextlib.suppress(KeyboardInterrupt, EOFError):
            input()
    finally:
        cluster.stop()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--watch"]:
        _watchdog_main(*sys.argv[2:5])
    else:
        _serve()

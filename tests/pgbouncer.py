"""A throw-away PgBouncer in front of the tests' PostgreSQL server (standard library only).

:func:`start` runs ``pgbouncer`` in the foreground on a private Unix socket in a temporary
directory (no TCP listener: no port can clash), in ``pool_mode`` ``transaction`` or ``session``,
with every database of the server behind it (``* =``), trusting the server URL's user (who may
also use its admin console: :meth:`Bouncer.reconnect`) and logging in to the server as that
user. :meth:`Bouncer.url` is a database's URL through it; :meth:`Bouncer.stop` ends it and
removes the directory. ``HAREL_SA_PGBOUNCER`` names the program to run (another version than
the PATH's); a PgBouncer that tracks prepared statements (1.21 and later) is started with
``max_prepared_statements = 200`` (the default since 1.24): :attr:`Bouncer.tracks_prepared`. As
root, PgBouncer (which refuses root) runs as the ``postgres`` user, as the cluster's programs
do (:mod:`tests.pg_cluster`), started as that user directly (no ``runuser`` between: a stop's
signal reaches it).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

PROGRAM_VARIABLE = "HAREL_SA_PGBOUNCER"
INSTALL_HINT = (
    "PgBouncer was not found: install it (Debian/Ubuntu: apt-get install pgbouncer; elsewhere "
    "the distribution's pgbouncer package) so that `pgbouncer` is on the PATH or in /usr/sbin, "
    f"or name one in {PROGRAM_VARIABLE}"
)
PORT = 6432
START_TIMEOUT = 10.0


class Unavailable(RuntimeError):
    """PgBouncer is not installed here; the message says what to install."""


def program() -> Path | None:
    """The ``pgbouncer`` program: ``HAREL_SA_PGBOUNCER`` (``None`` if it names no program),
    else on the PATH or where Debian puts it."""
    forced = os.environ.get(PROGRAM_VARIABLE)
    if forced:
        return Path(forced) if os.access(forced, os.X_OK) else None
    return installed()


def installed() -> Path | None:
    """The ``pgbouncer`` program on the PATH, or where Debian puts it."""
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/bin")
    return Path(found) if found else None


def version(binary: Path) -> tuple[int, ...]:
    """``pgbouncer --version``'s first line as numbers: ``PgBouncer 1.18.0`` -> (1, 18, 0)."""
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True)
    words = (done.stdout or done.stderr).split()
    return tuple(int(part) for part in words[1].split(".") if part.isdigit())


@dataclass
class Bouncer:
    """A running PgBouncer; ``mode`` its ``pool_mode``."""

    mode: str
    home: Path
    process: subprocess.Popen[bytes]
    version: tuple[int, ...]
    user: str

    @property
    def tracks_prepared(self) -> bool:
        """Whether it keeps a client's prepared statements across its server connections."""
        return self.version >= (1, 21)

    def reconnect(self, database_url: str) -> None:
        """Close each of its server connections to ``database_url``'s database once released
        (its admin console's ``RECONNECT``): what they had prepared is gone."""
        import psycopg

        database = urlsplit(database_url).path.lstrip("/")
        admin = urlunsplit(
            ("postgresql", f"{self.user}@", "/pgbouncer", f"host={self.home}&port={PORT}", "")
        )
        with psycopg.connect(admin, autocommit=True) as conn:
            # The console speaks only the simple query protocol: libpq's own exec.
            result = conn.pgconn.exec_(f"RECONNECT {database}".encode())
            if result.error_message:
                raise RuntimeError(result.error_message.decode(errors="replace"))

    def url(self, database_url: str) -> str:
        """The URL of ``database_url``'s database, through this PgBouncer."""
        database = urlsplit(database_url).path
        query = f"host={self.home}&port={PORT}"
        return urlunsplit(("postgresql", f"{self.user}@", database, query, ""))

    def log(self) -> str:
        """What PgBouncer printed and logged so far."""
        text = ""
        for name in ("output", "pgbouncer.log"):
            with contextlib.suppress(OSError):
                text += (self.home / name).read_text(errors="replace")
        return text

    def stop(self) -> None:
        """End PgBouncer (its connections to the server close) and remove its directory."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.home, ignore_errors=True)


def start(server_url: str, mode: str, pool_size: int = 4, binary: Path | None = None) -> Bouncer:
    """A PgBouncer in ``mode`` before the server of ``server_url`` (a ``postgresql://`` URL
    with a ``host`` and ``port``, a socket folder or a host name), at most ``pool_size`` server
    connections per database; ``binary``, or :func:`program`. Raises :class:`Unavailable` when
    PgBouncer is not installed, ``RuntimeError`` (with its log) when it does not start."""
    binary = binary or program()
    if binary is None:
        raise Unavailable(INSTALL_HINT)
    parts = urlsplit(server_url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    host = query.get("host") or parts.hostname or "/tmp"
    port = query.get("port") or (str(parts.port) if parts.port else "5432")
    login = unquote(parts.username or "postgres")
    server = f"host={host} port={port} user={login}"
    if parts.password:
        server += f" password={unquote(parts.password)}"
    user = "postgres" if os.geteuid() == 0 else None
    home = Path(tempfile.mkdtemp(prefix="harel-sa-pgb-", dir="/tmp"))
    settings = {
        "listen_addr": "",
        "unix_socket_dir": str(home),
        "listen_port": str(PORT),
        "auth_type": "trust",
        "auth_file": str(home / "users.txt"),
        "admin_users": login,
        "pool_mode": mode,
        "default_pool_size": str(pool_size),
        "max_client_conn": "500",
        "logfile": str(home / "pgbouncer.log"),
    }
    numbers = version(binary)
    if numbers >= (1, 21):
        settings["max_prepared_statements"] = "200"
    (home / "users.txt").write_text(f'"{login}" ""\n')
    config = home / "pgbouncer.ini"
    config.write_text(
        f"[databases]\n* = {server}\n[pgbouncer]\n"
        + "".join(f"{key} = {value}\n" for key, value in settings.items())
    )
    args = [str(binary), str(config)]
    ids: dict[str, object] = {}
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(home, entry.pw_uid, entry.pw_gid)
        ids = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
    with (home / "output").open("wb") as output:
        process = subprocess.Popen(args, stdout=output, stderr=subprocess.STDOUT, **ids)  # type: ignore[call-overload]
    bouncer = Bouncer(mode, home, process, numbers, login)
    deadline = time.monotonic() + START_TIMEOUT
    while not _listening(home / f".s.PGSQL.{PORT}"):
        if process.poll() is not None or time.monotonic() > deadline:
            log = bouncer.log()
            bouncer.stop()
            raise RuntimeError(f"pgbouncer did not start ({' '.join(args)}):\n{log}")
        time.sleep(0.02)
    return bouncer


def _listening(path: Path) -> bool:
    """Whether a connection to the Unix socket ``path`` is accepted. Its file alone is not
    enough: PgBouncer binds it (the file appears) before it listens, and a connection between
    the two is refused."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True

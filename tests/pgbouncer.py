"""A throw-away PgBouncer in front of the tests' PostgreSQL server (standard library only).

:func:`start` runs ``pgbouncer`` in the foreground on a private Unix socket in a temporary
directory (no TCP listener: no port can clash), in ``pool_mode`` ``transaction`` or ``session``,
with every database of the server behind it (``* =``) and no authentication of its own: it logs
in to the server as the server URL's user. :meth:`Bouncer.url` is a database's URL through it;
:meth:`Bouncer.stop` ends it and removes the directory. As root, PgBouncer (which refuses root)
runs as the ``postgres`` user, as the cluster's programs do (:mod:`tests.pg_cluster`), started
as that user directly (no ``runuser`` between: a stop's signal reaches it).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

INSTALL_HINT = (
    "PgBouncer was not found: install it (Debian/Ubuntu: apt-get install pgbouncer; elsewhere "
    "the distribution's pgbouncer package) so that `pgbouncer` is on the PATH or in /usr/sbin"
)
PORT = 6432
START_TIMEOUT = 10.0


class Unavailable(RuntimeError):
    """PgBouncer is not installed here; the message says what to install."""


def program() -> Path | None:
    """The ``pgbouncer`` program: on the PATH, or where Debian puts it."""
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/bin")
    return Path(found) if found else None


@dataclass
class Bouncer:
    """A running PgBouncer; ``mode`` its ``pool_mode``."""

    mode: str
    home: Path
    process: subprocess.Popen[bytes]

    def url(self, database_url: str) -> str:
        """The URL of ``database_url``'s database, through this PgBouncer."""
        database = urlsplit(database_url).path
        query = f"host={self.home}&port={PORT}"
        return urlunsplit(("postgresql", "postgres@", database, query, ""))

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


def start(server_url: str, mode: str, pool_size: int = 4) -> Bouncer:
    """A PgBouncer in ``mode`` before the server of ``server_url`` (a ``postgresql://`` URL
    with a ``host`` and ``port``, a socket folder or a host name), at most ``pool_size`` server
    connections per database. Raises :class:`Unavailable` when PgBouncer is not installed,
    ``RuntimeError`` (with its log) when it does not start."""
    binary = program()
    if binary is None:
        raise Unavailable(INSTALL_HINT)
    parts = urlsplit(server_url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    host = query.get("host") or parts.hostname or "/tmp"
    port = query.get("port") or (str(parts.port) if parts.port else "5432")
    server = f"host={host} port={port} user={unquote(parts.username or 'postgres')}"
    if parts.password:
        server += f" password={unquote(parts.password)}"
    user = "postgres" if os.geteuid() == 0 else None
    home = Path(tempfile.mkdtemp(prefix="harel-sa-pgb-", dir="/tmp"))
    settings = {
        "listen_addr": "",
        "unix_socket_dir": str(home),
        "listen_port": str(PORT),
        "auth_type": "any",
        "pool_mode": mode,
        "default_pool_size": str(pool_size),
        "max_client_conn": "500",
        "logfile": str(home / "pgbouncer.log"),
    }
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
    bouncer = Bouncer(mode, home, process)
    socket = home / f".s.PGSQL.{PORT}"
    deadline = time.monotonic() + START_TIMEOUT
    while not socket.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            log = bouncer.log()
            bouncer.stop()
            raise RuntimeError(f"pgbouncer did not start ({' '.join(args)}):\n{log}")
        time.sleep(0.02)
    return bouncer

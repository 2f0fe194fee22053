"""A real PostgreSQL primary and streaming standby on localhost TCP ports, for failover tests.

:func:`pair` starts a primary (``pg_cluster.start``) and a standby made by ``pg_basebackup -R``
(streaming replication; synchronous when asked: ``synchronous_standby_names = '*'``); each is a
:class:`~tests.pg_cluster.Cluster` with its own directory, watchdog and teardown. ``url``
names both in libpq's multi-host form with ``target_session_attrs=read-write``: the one that
is the primary. :func:`fail_over` stops the primary at once (``pg_ctl stop -m immediate``, as
a crash) and promotes the standby; :func:`rejoin` makes the crashed one a standby of the new
primary (a fresh base backup on its own port), for the way back.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests import pg_cluster
from tests.pg_cluster import Cluster


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pair(*, synchronous: bool) -> tuple[Cluster, Cluster]:
    """A running primary and its standby, caught up."""
    ports = free_port(), free_port()
    primary = pg_cluster.start(
        {
            "listen_addresses": "'127.0.0.1'",
            "synchronous_standby_names": "'*'" if synchronous else "''",
            "wal_level": "replica",
            "max_wal_senders": "5",
        },
        port=ports[0],
    )
    try:
        standby = _standby(primary, ports[1])
    except BaseException:
        primary.stop()
        raise
    return primary, standby


@contextmanager
def queue_pair(*, synchronous: bool) -> Iterator[tuple[Cluster, Cluster, str]]:
    """:func:`pair` with a database ``queue`` made on the primary (the standby replays it):
    the primary, the standby and :func:`url` of ``queue``; both servers stopped after."""
    primary, standby = pair(synchronous=synchronous)
    try:
        primary.execute('CREATE DATABASE "queue"')
        yield primary, standby, url(primary, standby, "queue")
    finally:
        standby.stop()
        primary.stop()


def _standby(primary: Cluster, port: int) -> Cluster:
    assert primary.bindir is not None and primary.home is not None
    user = primary.user
    home = Path(tempfile.mkdtemp(prefix="harel-sa-standby-", dir=primary.home.parent))
    standby = Cluster(
        f"postgresql://postgres@/postgres?host={home}&port={port}", home, primary.bindir, user
    )
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(home, entry.pw_uid, entry.pw_gid)
    _follow(primary, standby)
    standby._watchdog = pg_cluster._watch(primary.bindir, home, user)
    pg_cluster._pg_ctl(standby, "start")
    return standby


def rejoin(old: Cluster, new: Cluster) -> None:
    """``old`` (stopped: the crashed primary) comes back as a standby of ``new``, on its own
    port and directory, from a fresh base backup (what it wrote after the crash is gone)."""
    assert old.home is not None
    shutil.rmtree(old.home / "data")
    _follow(new, old)
    pg_cluster._pg_ctl(old, "start")


def _follow(primary: Cluster, standby: Cluster) -> None:
    """``standby``'s data: a base backup of ``primary``, set to stream from it."""
    assert primary.bindir is not None and primary.home is not None and standby.home is not None
    user, home, port = primary.user, standby.home, _port(standby)
    source = f"host={primary.home} port={_port(primary)} user=postgres"
    backup = ["-D", home / "data", "-R", "-X", "stream", "-c", "fast", "-d", source]
    pg_cluster._run(
        [primary.bindir / "pg_basebackup", *backup],
        user,
        "pg_basebackup",
    )
    with (home / "data" / "postgresql.conf").open("a") as f:
        f.write(
            f"port = {port}\nunix_socket_directories = '{home}'\n"
            "listen_addresses = '127.0.0.1'\nsynchronous_standby_names = ''\n"
        )


def _port(cluster: Cluster) -> int:
    return int(cluster.url.rsplit("port=", 1)[1])


def url(primary: Cluster, standby: Cluster, database: str) -> str:
    """Both servers in libpq's multi-host form, the read-write one chosen."""
    hosts = ",".join(f"127.0.0.1:{_port(c)}" for c in (primary, standby))
    return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"


def fail_over(primary: Cluster, standby: Cluster) -> None:
    """The primary crashes (immediate stop: no clean shutdown); the standby is promoted."""
    assert primary.bindir is not None
    pg_cluster._pg_ctl(primary, "stop", "-m", "immediate")
    pg_cluster._pg_ctl(standby, "promote")

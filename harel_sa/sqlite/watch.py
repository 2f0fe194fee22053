"""What a transport checks around each operation, written once for both drivers.

A :class:`Watch` belongs to one driver connection and wraps every operation run on it. **The
process:** a SQLite connection never crosses ``fork()``: a forked child refuses a transport its
parent opened, and a file its parent had open (:class:`~harel_sa.ForkedError`). **The file:**
after every operation the path is ``stat``-ed; once the file was deleted, renamed or replaced,
that operation and every later one raise :class:`~harel_sa.DatabaseReplacedError` (a write
nobody else will see is reported, never acknowledged). **The write-ahead log:** every
:data:`WAL_CHECK_EVERY` operations, a log past :data:`WAL_LIMIT` is checkpointed (``RESTART``),
so readers polling back to back cannot make it grow without bound.
"""

from __future__ import annotations

import collections
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from typing import TypeVar

from harel_sa.errors import DatabaseReplacedError, ForkedError

T = TypeVar("T")
FileId = tuple[int, int]  # (st_dev, st_ino)

log = logging.getLogger("harel_sa")

#: The write-ahead log's size past which a transport forces a ``RESTART`` checkpoint; also the
#: ``journal_size_limit`` it sets, the size the log is cut back to once restarted.
WAL_LIMIT = 16 * 1024 * 1024
#: How many operations pass between two looks at the log's size (one ``stat`` each).
WAL_CHECK_EVERY = 256
#: The longest a forced checkpoint keeps trying while readers hold the log (seconds).
CHECKPOINT_WAIT = 0.5

_generation = 0  # bumped in every forked child: a connection opened before is not ours
_open: collections.Counter[FileId] = collections.Counter()  # files our transports have open
_open_lock = threading.Lock()  # connections open and close on aiosqlite's threads too
_inherited: set[FileId] = set()  # files a parent of this process had open when it forked
_abandoned: list[object] = []  # connections inherited from a parent: kept alive, never closed
_watches: weakref.WeakSet[Watch] = weakref.WeakSet()  # every watch of this process


def _after_fork_in_child() -> None:
    global _generation, _open_lock
    _generation += 1
    _open_lock = threading.Lock()  # a parent's thread may have held it at the fork
    _inherited.update(file for file, count in _open.items() if count > 0)
    _open.clear()
    for watch in list(_watches):
        watch.blocked = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def file_path(database: str | None) -> str | None:
    """The filesystem path a SQLite ``database`` name designates, or ``None`` (in memory)."""
    if not database or database == ":memory:":
        return None
    if database.startswith("file:"):
        path, _, query = database[len("file:") :].partition("?")
        if not path or path == ":memory:" or "mode=memory" in query:
            return None
        return path
    return database


def _file_id(path: str) -> FileId | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def refuse_inherited(database: str | None) -> None:
    """Raise :class:`~harel_sa.ForkedError` if a parent of this process had this file open
    when it forked this process (checked before any connection is opened). SQLite keeps its lock
    bookkeeping per process, and a child inherits a copy that claims the parent's locks without
    holding them: a child that opened a *fresh* connection to a file its parent had open lost
    committed writes when the parent closed its own."""
    path = file_path(database)
    found = _file_id(path) if path else None
    if found is not None and found in _inherited:
        raise ForkedError(
            f"{path} was open in a parent process when it forked this one (pid {os.getpid()}): "
            "SQLite's locks do not protect a connection opened here while the parent's is "
            "open. Close the parent's transport before forking, or start this process with "
            "multiprocessing's 'spawn' or 'forkserver' method."
        )


def abandon(*objects: object) -> None:
    """Keep ``objects`` (a connection inherited from a parent) alive and never close them."""
    _abandoned.append(objects)


class Watch:
    """The checks around each operation on one connection (see the module's docstring)."""

    __slots__ = (
        "__weakref__",
        "blocked",
        "busy_timeout",
        "file",
        "generation",
        "lost",
        "next_wal_check",
        "ops",
        "path",
        "pid",
        "wal_trigger",
    )

    def __init__(self, conn: sqlite3.Connection, busy_timeout: float) -> None:
        """Watch ``conn``, just opened in this process on the file it names (if any)."""
        self.busy_timeout = busy_timeout
        self.generation = _generation
        self.pid = os.getpid()
        self.path = main_file(conn)
        self.file = _file_id(self.path) if self.path else None
        if self.file is not None:
            with _open_lock:
                _open[self.file] += 1
        self.lost: str | None = None
        #: Whether :meth:`before` refuses (a forked child, a file found replaced): one attribute
        #: read on the hot path instead of a call.
        self.blocked = False
        _watches.add(self)
        self.ops = 0
        self.next_wal_check = WAL_CHECK_EVERY
        self.wal_trigger = WAL_LIMIT

    @property
    def forked(self) -> bool:
        """Whether this process is a fork of the one that opened the connection."""
        return self.generation != _generation

    def before(self) -> None:
        """Refuse an operation in a forked child, or on a file already found replaced."""
        if self.generation != _generation:
            raise ForkedError(
                f"this transport was opened in process {self.pid}, and this process "
                f"({os.getpid()}) is a fork of it: a SQLite connection must never cross "
                "fork(), so it is neither used nor closed here. Open transports only in the "
                "processes that use them: close the parent's before forking and open one after "
                "the fork (gunicorn's post_fork hook, say), or start workers with "
                "multiprocessing's 'spawn' or 'forkserver' method."
            )
        if self.lost is not None:
            raise DatabaseReplacedError(self.lost)

    def run(self, call: Callable[[sqlite3.Connection], T], conn: sqlite3.Connection) -> T:
        """``call(conn)``, the file checked after it (see the module's docstring) and the log's
        size looked at every :data:`WAL_CHECK_EVERY` calls; the caller ran :meth:`before`."""
        try:
            result = call(conn)
        except BaseException:
            self._check_file(conn)
            raise
        self._check_file(conn)
        self.ops += 1
        if self.ops >= self.next_wal_check:
            self._bound_wal(conn)
        return result

    def closed(self) -> None:
        """The connection was closed (in the process that opened it)."""
        if self.file is not None and not self.forked:
            with _open_lock:
                _open[self.file] -= 1

    def _check_file(self, conn: sqlite3.Connection) -> None:
        """After every operation, before its result is returned: is the path still the file the
        connection opened? (A ``stat`` is far cheaper than the commit before it.)"""
        if self.file is None or self.path is None:
            return
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            what = "deleted or renamed"
        except OSError:
            return  # cannot look (permissions changed, say): nothing known to be wrong
        else:
            if (st.st_dev, st.st_ino) == self.file:
                return
            what = "replaced by another file"
        self.blocked = True
        self.lost = (
            f"{self.path} was {what} after this transport opened it: its writes since went to "
            "a file nobody else will see. Close the transport and open a new one on the file "
            "that holds the queue now."
        )
        # The -wal and -shm files keep the old name: a process opening the file now at the
        # path would read this log's pages as its own (a restored backup would show the old
        # queue). Copy the log into the file it belongs to, wherever it is now, and empty it.
        checkpoint(conn, "TRUNCATE", self.busy_timeout)
        raise DatabaseReplacedError(self.lost)

    def _bound_wal(self, conn: sqlite3.Connection) -> None:
        """SQLite's automatic checkpoints are passive: with readers polling back to back they
        never reach the end of the log, which then never restarts. Past the limit, a
        ``RESTART`` copies the whole log into the file and waits (:func:`checkpoint`) for the
        readers to move off it, so the next write starts the log again."""
        self.next_wal_check = self.ops + WAL_CHECK_EVERY
        if self.path is None:
            return
        try:
            size = os.stat(f"{self.path}-wal").st_size
        except OSError:
            return
        if size <= self.wal_trigger:
            return
        if checkpoint(conn, "RESTART", self.busy_timeout):
            self.wal_trigger = WAL_LIMIT
        else:  # a reader kept its snapshot: try again once the log has grown another limit
            self.wal_trigger = size + WAL_LIMIT


def checkpoint(conn: sqlite3.Connection, mode: str, busy_timeout: float) -> bool:
    """Checkpoint the whole log (``RESTART`` or ``TRUNCATE``), trying again every half
    millisecond for at most :data:`CHECKPOINT_WAIT` seconds; whether it completed.

    Not SQLite's busy handler: it sleeps up to 100 ms between tries, and a reader polling back
    to back is inside a read at every one of them, so such a checkpoint often gives up; tries
    half a millisecond apart soon find a gap between two reads.
    """
    deadline = time.monotonic() + min(busy_timeout, CHECKPOINT_WAIT)
    try:
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            while True:
                busy = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()[0]
                if not busy or time.monotonic() >= deadline:
                    return not busy
                time.sleep(0.0005)
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    except sqlite3.Error as exc:  # upkeep, not the operation: the next operation will see it
        read_only = getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_READONLY
        (log.debug if read_only else log.warning)(
            "harel_sa: wal_checkpoint(%s) failed: %s", mode, exc
        )
        return False


def main_file(conn: sqlite3.Connection) -> str | None:
    """The path of ``conn``'s main database file, or ``None`` (in memory, temporary)."""
    for _, name, path in conn.execute("PRAGMA database_list").fetchall():
        if name == "main":
            return str(path) or None
    return None

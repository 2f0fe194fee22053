"""Read-only commands really only read: ``stats``, ``peek``, ``dead list``, ``db current``,
``db check`` open the file ``mode=ro``: its bytes never change, no journal-mode switch, no file
is created; a read-only file in a read-only directory is read where SQLite can read it, and
where it cannot (WAL without its -shm) the command says exactly why. A ``mode=ro`` URL is
honoured by every command. Run as a deploy pipeline would: real processes on real files, and
where root would bypass permissions, as the unprivileged ``nobody``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from harel_sa import HEAD_REVISION, Event, SqliteTransport, migrations
from tests.cli.conftest import ROOT, Cli, as_json, one_line_error

READERS = [
    ["stats"],
    ["peek"],
    ["dead", "list"],
    ["db", "current"],
    ["db", "check"],
]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def journal_mode(path: Path) -> str:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])


@pytest.mark.parametrize("command", READERS, ids=" ".join)
def test_a_sqlite_file_of_someone_else_is_not_touched(
    cli: Cli, tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO items VALUES (1, 'x')")
    conn.close()
    before, listing = digest(path), files(tmp_path)
    done = cli(*command, "--db", str(path))
    # db current only reports (exit 0); the others refuse: db check 1, the queue commands 3
    assert done.returncode == {"current": 0, "check": 1}.get(command[-1], 3), done.stderr
    text = done.stdout + done.stderr
    assert "no harel_sa queue under prefix 'harel' here" in text
    assert "Traceback" not in text
    assert (digest(path), files(tmp_path), journal_mode(path)) == (before, listing, "delete")


@pytest.mark.parametrize("command", READERS, ids=" ".join)
def test_an_empty_file_stays_empty(cli: Cli, tmp_path: Path, command: list[str]) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    done = cli(*command, "--db", str(path))
    assert "no harel_sa queue under prefix 'harel' here" in done.stdout + done.stderr
    assert path.stat().st_size == 0 and files(tmp_path) == ["empty.db"]


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_a_queue_is_read_without_a_byte_of_it_changing(
    cli: Cli, tmp_path: Path, journal: str
) -> None:
    path = tmp_path / "q.db"
    with SqliteTransport(path) as q:
        q.publish("g", Event(kind="one"))
        q.nack(q.claim("w", 30.0), 3600.0)  # parked: a release would write
    if journal == "delete":  # as `harel-sa db upgrade` leaves a file: no WAL switch to make
        with closing(sqlite3.connect(path)) as conn:
            conn.execute("PRAGMA journal_mode = DELETE")
    before = digest(path)
    for command in READERS:
        assert cli(*command, "--db", str(path)).returncode == 0, command
    assert digest(path) == before and journal_mode(path) == journal
    # SQLite's own side files of a WAL database: a reader needs the shared-memory index and
    # creates it (and an empty -wal) when they are missing; a read-only connection leaves them.
    assert set(files(tmp_path)) <= {"q.db", "q.db-shm", "q.db-wal"}
    assert not (tmp_path / "q.db-wal").exists() or (tmp_path / "q.db-wal").stat().st_size == 0


@pytest.mark.parametrize(
    "query", ["?mode=ro", "?mode=ro&uri=true"], ids=["mode=ro", "mode=ro&uri=true"]
)
def test_a_mode_ro_url_is_honoured_by_every_command(cli: Cli, tmp_path: Path, query: str) -> None:
    path = tmp_path / "q.db"
    with SqliteTransport(path) as q:
        q.publish("g", Event(kind="one"))
        q.nack(q.claim("w", 30.0), 3600.0)
    before = digest(path)
    url = f"sqlite:///{path}{query}"
    stats = cli("stats", "--url", url, "--json")
    assert as_json(stats)["parked"] == 1 and "Warning" not in stats.stderr
    for command in (["release"], ["dead", "requeue"], ["purge", "--group", "g", "--yes"]):
        line = one_line_error(cli(*command, "--url", url))
        assert "readonly" in line and "SQLITE_READONLY" in line, line
    assert cli("db", "check", "--url", url).returncode == 0
    assert digest(path) == before
    assert not [p for p in tmp_path.iterdir() if "?" in p.name]  # no "q.db?mode=ro" file
    with SqliteTransport(path, create_schema=False) as q:
        assert q.stats().parked == 1  # nothing was released


# --- as an unprivileged user: a read-only file in a read-only directory ---------------------


@pytest.fixture
def locked_dir() -> Iterator[Path]:
    """A directory the test fills, then makes read-only (0555, files 0444) for the command."""
    base = Path(tempfile.mkdtemp(prefix="harel-ro-"))
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        os.chmod(base, 0o755)
        shutil.rmtree(base)


def lock(folder: Path) -> None:
    for p in folder.iterdir():
        os.chmod(p, 0o444)
    os.chmod(folder, 0o555)


def unprivileged(command: list[str]) -> list[str]:
    """``command`` run without write access to what its modes forbid: as root (which ignores
    them), with no capability left (``setpriv``, util-linux), so the interpreter stays
    reachable wherever it is installed (say, under a 0700 ``/root``)."""
    if os.geteuid() != 0:
        return command
    return ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--", *command]


def as_user(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m harel_sa ARGS`` without write access (:func:`unprivileged`)."""
    return subprocess.run(
        unprivileged([sys.executable, "-m", "harel_sa", *args]),
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )


def a_queue(path: Path, journal: str) -> None:
    with SqliteTransport(path) as q:
        q.publish("g", Event(kind="one"))
    if journal == "delete":
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA journal_mode = DELETE")
        conn.close()


def test_a_rollback_journal_queue_is_read_in_a_read_only_directory(locked_dir: Path) -> None:
    path = locked_dir / "q.db"
    a_queue(path, "delete")
    lock(locked_dir)
    before = digest(path)
    for command in READERS:
        done = as_user(*command, "--db", str(path), cwd=locked_dir.parent)
        assert done.returncode == 0, (command, done.stderr)
    stats = as_json(as_user("stats", "--db", str(path), "--json", cwd=locked_dir.parent))
    assert stats["messages"] == 1
    assert (digest(path), files(locked_dir)) == (before, ["q.db"])


def test_a_wal_queue_with_its_side_files_is_read_in_a_read_only_directory(
    locked_dir: Path,
) -> None:
    """A process that ended without closing leaves -wal and -shm: SQLite reads through them."""
    path = locked_dir / "q.db"
    code = (
        "import os, sys; from harel_sa import Event, SqliteTransport; "
        "q = SqliteTransport(sys.argv[1]); q.publish('g', Event(kind='one')); os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=120)
    assert set(files(locked_dir)) == {"q.db", "q.db-shm", "q.db-wal"}
    lock(locked_dir)
    done = as_user("stats", "--db", str(path), "--json", cwd=locked_dir.parent)
    assert done.returncode == 0, done.stderr
    assert as_json(done)["messages"] == 1


def test_a_wal_queue_without_its_shm_in_a_read_only_directory_says_what_sqlite_needs(
    locked_dir: Path,
) -> None:
    path = locked_dir / "q.db"
    a_queue(path, "wal")
    assert files(locked_dir) == ["q.db"]  # closed cleanly: no side files
    lock(locked_dir)
    for command in READERS:
        done = as_user(*command, "--db", str(path), cwd=locked_dir.parent)
        line = one_line_error(done)
        assert done.returncode == 1, (command, line)
        assert "the file is in WAL mode" in line and "-shm" in line, line
        assert "SQLITE_READONLY_DIRECTORY" in line and "not a SQLite database" not in line
    assert files(locked_dir) == ["q.db"]


def test_the_transport_reads_a_read_only_file_and_refuses_writes(locked_dir: Path) -> None:
    """The transports honour a file they may not write too: reading works, writes raise
    ReadOnlyError (the pipeline's view of a file mounted read-only)."""
    path = locked_dir / "q.db"
    a_queue(path, "delete")
    lock(locked_dir)
    code = (
        "import sys; from harel_sa import Event, ReadOnlyError, SqliteTransport\n"
        "q = SqliteTransport(sys.argv[1], create_schema=False)\n"
        "print(q.stats().messages)\n"
        "try:\n    q.publish('g', Event(kind='two'))\nexcept ReadOnlyError as e:\n"
        "    print('ReadOnlyError')\n"
    )
    done = subprocess.run(
        unprivileged([sys.executable, "-c", code, str(path)]),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.stdout.split() == ["1", "ReadOnlyError"], done.stderr
    assert migrations.current(path) == (HEAD_REVISION,)


MOUNTED = r"""
set -eu
mount -t tmpfs -o size=16m tmpfs "$DIR"
"$PY" -c "import os, sys; from harel_sa import Event, SqliteTransport
q = SqliteTransport(sys.argv[1]); q.publish('g', Event(kind='one')); os._exit(0)" "$DIR/q.db"
rm "$DIR/q.db-shm"  # a -wal file without its -shm (a copy, a crash between the two)
mount -o remount,ro "$DIR"
for command in "stats" "peek" "db check"; do
  "$PY" -m harel_sa $command --db "$DIR/q.db" 2>&1 && exit 9 || echo "exit $?"
done
"$PY" -c "import sys; from harel_sa import ReadOnlyError, SqliteTransport
try:
    SqliteTransport(sys.argv[1], create_schema=False)
except ReadOnlyError as exc:
    print('ReadOnlyError:', exc)" "$DIR/q.db"
"""


def test_a_wal_queue_on_a_read_only_mount_says_so(tmp_path: Path) -> None:
    """``mount -o remount,ro``: SQLite says only SQLITE_CANTOPEN for a file that exists; the
    commands and the transport say that the mount is read-only and what SQLite needs there.
    In a mount namespace of its own (as root; else a user namespace mapping root)."""
    unshare = ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "-rm"]
    where = tmp_path / "mnt"
    where.mkdir()
    done = subprocess.run(
        [*unshare, "bash", "-c", MOUNTED],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), "DIR": str(where), "PY": sys.executable},
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines.count("exit 1") == 3, done.stdout
    said = [line for line in lines if line.startswith(("harel-sa:", "ReadOnlyError:"))]
    assert len(said) == 4, done.stdout
    for line in said:
        assert "read-only mount" in line and "-shm" in line and "SQLITE_CANTOPEN" in line, line

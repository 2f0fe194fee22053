"""``harel-sa worker MODULE:CALLABLE`` as an operator runs it: a real process in a project
directory, its handler imported from there, its logs on stderr, its metrics scraped over HTTP,
stopped with SIGTERM; and each way it refuses to start."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import harel_sa
from harel_sa import Event, SqliteTransport, migrations
from tests.cli.conftest import ROOT, Cli, one_line_error

HANG = 60.0  # guards against a hang, never a timing assertion

APP = """
import asyncio
import os

from harel_sa import DeadLetter, Retry

def handle(lease):
    print("handled", lease.group_id, lease.event.kind, flush=True)
    if lease.event.kind == "poison":
        raise DeadLetter("cannot parse it")
    if lease.event.kind == "later":
        raise Retry(3600, "the bank is closed")
    if lease.event.kind == "exit":
        raise SystemExit(7)

async def handle_async(lease):
    await asyncio.sleep(0)
    print("async handled", lease.group_id, flush=True)

not_callable = 42
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project directory with ``app.py`` and ``queue.db`` at head."""
    (tmp_path / "app.py").write_text(APP)
    migrations.upgrade(str(tmp_path / "queue.db"))
    return tmp_path


def publish(project: Path, *kinds: str) -> None:
    with SqliteTransport(str(project / "queue.db")) as q:
        for n, kind in enumerate(kinds):
            q.publish(f"g{n}", Event(kind=kind))


class Process:
    """``harel-sa worker ...`` running in ``cwd``; stdout and stderr collected as they come."""

    def __init__(self, cwd: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.out: list[str] = []
        self.err: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harel_sa", "worker", *args],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        )
        for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._read, args=(stream, lines), daemon=True).start()

    @staticmethod
    def _read(stream: object, lines: list[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, lines: list[str] | None = None) -> re.Match[str]:
        deadline = time.monotonic() + HANG
        while time.monotonic() < deadline:
            for line in list(self.err if lines is None else lines):
                if found := re.search(pattern, line):
                    return found
            if self.proc.poll() is not None and lines is None:
                time.sleep(0.2)  # let the readers drain
                for line in self.err:
                    if found := re.search(pattern, line):
                        return found
                pytest.fail(f"exited {self.proc.returncode} before {pattern!r}: {self.err}")
            time.sleep(0.02)
        pytest.fail(f"gave up waiting for {pattern!r}: {self.err}")

    def stop(self, signum: int = signal.SIGTERM) -> int:
        self.proc.send_signal(signum)
        return self.proc.wait(HANG)

    def logs(self) -> list[dict[str, object]]:
        time.sleep(0.1)
        return [json.loads(line) for line in self.err if line.startswith("{")]


@pytest.fixture
def started() -> Iterator[list[Process]]:
    processes: list[Process] = []
    yield processes
    for p in processes:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait(HANG)


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=HANG) as page:
        text = page.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def test_start_handle_scrape_and_stop_on_sigterm(project: Path, started: list[Process]) -> None:
    publish(project, "paid", "poison", "later")
    worker = Process(
        project,
        "app:handle",
        "--db",
        "queue.db",
        "--log-format",
        "json",
        "--metrics-port",
        "0",
        "--metrics-host",
        "127.0.0.1",
        "--worker-id",
        "billing-1",
    )
    started.append(worker)
    port = int(worker.wait_for(r"serving metrics at http://127\.0\.0\.1:(\d+)/metrics").group(1))
    worker.wait_for(r"handled g2 later", worker.out)
    deadline = time.monotonic() + HANG
    # The retry is counted as the handler raises, its park commits just after: wait for both.
    while (samples := scrape(port)).get("harel_sa_worker_retried_total") != 1.0 or samples.get(
        'harel_sa_queue_messages{state="parked"}'
    ) != 1.0:
        assert time.monotonic() < deadline, samples
        time.sleep(0.05)
    assert samples["harel_sa_worker_claimed_total"] == 3.0
    assert samples["harel_sa_worker_succeeded_total"] == 1.0
    assert samples["harel_sa_worker_dead_lettered_total"] == 1.0
    assert samples["harel_sa_worker_lost_total"] == 0.0
    assert samples["harel_sa_worker_handler_duration_seconds_count"] == 3.0
    assert samples['harel_sa_queue_messages{state="parked"}'] == 1.0
    assert samples['harel_sa_queue_messages{state="ready"}'] == 0.0
    assert samples["harel_sa_queue_dead_messages"] == 1.0
    assert samples["harel_sa_queue_published_total"] == 3.0

    assert worker.stop(signal.SIGTERM) == 0
    logs = worker.logs()
    assert all(
        re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", str(r["time"])) for r in logs
    )
    start = next(r for r in logs if "started" in str(r["message"]))
    assert (start["level"], start["worker_id"], start["prefix"]) == ("INFO", "billing-1", "harel")
    assert "queue.db" in str(start["database"]) and "max_deliveries=10" in str(start["message"])
    dead = next(r for r in logs if str(r["message"]).startswith("dead-lettered"))
    assert (dead["level"], dead["group_id"]) == ("INFO", "g1")
    assert any(
        r["message"] == "SIGTERM received: stopping; no more claims, 0 handler(s) in "
        "flight get 10s of grace"
        for r in logs
    )
    stopped = next(r for r in logs if "stopped:" in str(r["message"]))
    assert (stopped["claimed"], stopped["succeeded"], stopped["dead_lettered"]) == (3, 1, 1)
    with SqliteTransport(str(project / "queue.db")) as q:
        [dead_row] = q.dead()
        assert dead_row.error == "cannot parse it"


def test_an_async_handler_is_detected_and_run_on_an_async_worker(project: Path, cli: Cli) -> None:
    publish(project, "a", "b")
    done = _run(project, "app:handle_async", "--db", "queue.db", "--until-empty")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split("\n")[:-1]) == ["async handled g0", "async handled g1"]
    assert "is async: running an AsyncWorker" in done.stderr
    assert "started (asyncio tasks)" in done.stderr


def _run(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harel_sa", "worker", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=HANG,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def test_options_come_from_the_environment_and_flags_win(project: Path) -> None:
    publish(project, "paid")
    env = {
        "HAREL_SA_DB": "queue.db",
        "HAREL_SA_MAX_DELIVERIES": "3",
        "HAREL_SA_CONCURRENCY": "2",
        "HAREL_SA_LOG_LEVEL": "DEBUG",
    }
    done = _run(project, "app:handle", "--until-empty", "--concurrency", "4", env=env)
    assert done.returncode == 0, done.stderr
    assert "concurrency=4 " in done.stderr and "max_deliveries=3 " in done.stderr
    assert " DEBUG harel_sa.worker: claimed g0 seq 1 (delivery 1)" in done.stderr


def test_a_bad_environment_value_names_its_variable(project: Path) -> None:
    done = _run(project, "app:handle", env={"HAREL_SA_DB": "queue.db", "HAREL_SA_GRACE": "soon"})
    assert done.returncode == 2
    assert "HAREL_SA_GRACE='soon'" in one_line_error(done)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--pooler", "session"], "--pooler is for a postgresql:// --url"),
        (["--pooler", "sessions"], "must be one of auto, session, transaction"),
    ],
)
def test_a_pooler_mode_on_a_sqlite_file_or_an_unknown_one_exits_2(
    project: Path, args: list[str], says: str
) -> None:
    done = _run(project, "app:handle", "--db", "queue.db", *args)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr


@pytest.mark.parametrize(
    ("handler", "says"),
    [
        ("app", "must be given as MODULE:CALLABLE"),
        ("nosuchmodule:handle", "cannot import nosuchmodule: ModuleNotFoundError"),
        ("app:nosuch", "app has no 'nosuch'"),
        ("app:not_callable", "is a int, not a callable"),
        ("app.py:handle", "not a file path: app:handle, not 'app.py:handle'"),
        ("./app:handle", "not a file path: app:handle, not './app:handle'"),
    ],
)
def test_a_bad_import_path_is_one_line_and_exit_2(project: Path, handler: str, says: str) -> None:
    done = _run(project, handler, "--db", "queue.db")
    assert done.returncode == 2
    assert says in one_line_error(done)


def test_a_database_not_at_head_exits_3(project: Path) -> None:
    migrations.upgrade(str(project / "old.db"), revision="harel_sa_0002")
    done = _run(project, "app:handle", "--db", "old.db")
    assert done.returncode == 3
    assert "harel-sa db upgrade" in one_line_error(done)


def test_a_handlers_system_exit_releases_its_message_and_is_the_exit_status(
    project: Path,
) -> None:
    publish(project, "exit")
    done = _run(project, "app:handle", "--db", "queue.db", "--visibility", "3600")
    assert done.returncode == 7, done.stderr
    with SqliteTransport(str(project / "queue.db")) as q:
        [message] = q.peek()
        assert (message.state, message.deliveries) == ("ready", 1)  # released, not held 1 h


def test_version_and_debug_anywhere(cli: Cli) -> None:
    version = cli("--version")
    assert version.returncode == 0
    assert version.stdout.strip() == f"harel-sa {harel_sa.__version__}"
    from importlib.metadata import version as installed

    assert harel_sa.__version__ == installed("harel-sa") != "0+unknown"
    for args in (["stats", "--db", "x.db", "--debug"], ["--debug", "stats", "--db", "x.db"]):
        done = cli(*args)  # accepted before and after the subcommand: the error is the file's
        assert done.returncode == 2 and "no such database file: x.db" in done.stderr, args
    assert "unrecognized arguments: --frobnicate" in cli("stats", "--frobnicate").stderr


def test_batch_and_ack_wait_reach_the_worker(project: Path) -> None:
    publish(project, "paid", "paid", "paid")
    env = {"HAREL_SA_DB": "queue.db", "HAREL_SA_ACK_WAIT": "0.01"}
    done = _run(
        project, "app:handle", "--until-empty", "--concurrency", "3", "--batch", "3", env=env
    )
    assert done.returncode == 0, done.stderr
    assert "concurrency=3 " in done.stderr and " batch=3 ack_wait=0.01s" in done.stderr
    assert done.stdout.count("handled") == 3
    bad = _run(project, "app:handle", "--batch", "0", env=env)
    assert bad.returncode == 2 and "--batch" in one_line_error(bad)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--metrics-port", "99999"], "--metrics-port: must be a whole number from 0 to 65535"),
        (["--metrics-port", "-1"], "--metrics-port: must be a whole number from 0 to 65535"),
        (["--concurrency", str(2**63)], "--concurrency: must be a whole number from 1 to"),
        (["--min-priority", str(2**70)], "--min-priority: must be a whole number from 0 to"),
    ],
)
def test_a_number_out_of_range_is_a_usage_error(project: Path, args: list[str], says: str) -> None:
    done = _run(project, "app:handle", "--db", "queue.db", *args)
    assert done.returncode == 2, done.stderr
    assert says in one_line_error(done)

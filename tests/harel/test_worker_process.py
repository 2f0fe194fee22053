"""``python -m harel_sa.harel_worker``: harel's worker process, configured by harel's own
``HAREL_*`` variables, running the engine on harel_sa's transport until SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harel import SqliteStore
from harel.config import Config
from harel.engine.distributed import DistributedRunner

import harel_sa
from harel_sa.harel_worker import open_transport
from tests.harel import engine

ROOT = Path(__file__).resolve().parents[2]


def test_harels_worker_process_runs_on_harel_sa(tmp_path: Path) -> None:
    store_db, queue_db = tmp_path / "store.db", tmp_path / "queue.db"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "HAREL_STORE_BACKEND": "sqlite",
        "HAREL_STORE_DB": str(store_db),
        "HAREL_TRANSPORT_BACKEND": "sqlite",
        "HAREL_TRANSPORT_DB": str(queue_db),
        "HAREL_DEFINITIONS_DIR": str(engine.write_machine(tmp_path / "machines", timeout=1)),
        "HAREL_WORKER_ID": "engine-worker",
    }
    store = SqliteStore(store_db)
    transport = harel_sa.SqliteTransport(queue_db)
    runner = DistributedRunner(store, transport, engine.definitions())
    ids = engine.start(runner)
    worker = subprocess.Popen(
        [sys.executable, "-m", "harel_sa.harel_worker"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and worker.poll() is None:
            # done when every execution is, and the worker has acked what it was handling
            if all(store.load(i).status.name == "DONE" for i in ids) and not (
                transport.stats().messages
            ):
                break
            time.sleep(0.1)
        assert [engine.summary(store.load(i)) for i in ids] == [engine.EXPECTED] * len(ids)
    finally:
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=30)
        transport.close()
        store.close()
    assert worker.returncode == 0, output
    with sqlite3.connect(queue_db) as raw:
        tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert "harel_transport_dead" in tables  # harel_sa's schema: it was harel_sa's transport
        assert raw.execute("SELECT count(*) FROM harel_transport_messages").fetchone()[0] == 0


def test_other_backends_are_built_by_harel_as_its_worker_would() -> None:
    config = Config.from_env({"HAREL_TRANSPORT_BACKEND": "redis"})
    with pytest.raises(ValueError, match="HAREL_REDIS_URL is required"):
        asyncio.run(open_transport(config))


def test_the_sqlite_backend_needs_its_file() -> None:
    config = Config.from_env({"HAREL_TRANSPORT_BACKEND": "sqlite"})
    with pytest.raises(ValueError, match="HAREL_TRANSPORT_DB is required"):
        asyncio.run(open_transport(config))

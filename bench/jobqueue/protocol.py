"""What every Python adapter shares: the harness's settings, its JSONL records, the producer's
pacing (credited on real elapsed time, as the protocol requires) and the pickup-latency window."""

from __future__ import annotations

import collections
import datetime as dt
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


def env_int(key: str, default: int) -> int:
    value = os.environ.get(key)
    return int(value) if value not in (None, "") else default


@dataclass(frozen=True)
class Settings:
    """The harness's environment (its defaults where unset)."""

    url: str = field(default_factory=lambda: os.environ["DATABASE_URL"])
    mode: str = field(default_factory=lambda: os.environ.get("PRODUCER_MODE", "fixed"))
    rate: int = field(default_factory=lambda: env_int("PRODUCER_RATE", 800))
    rate_file: str = field(default_factory=lambda: os.environ.get("PRODUCER_RATE_CONTROL_FILE", ""))
    batch_max: int = field(default_factory=lambda: max(1, env_int("PRODUCER_BATCH_MAX", 128)))
    batch_ms: int = field(default_factory=lambda: max(1, env_int("PRODUCER_BATCH_MS", 10)))
    target_depth: int = field(default_factory=lambda: env_int("TARGET_DEPTH", 1000))
    workers: int = field(default_factory=lambda: env_int("WORKER_COUNT", 8))
    payload: int = field(default_factory=lambda: env_int("JOB_PAYLOAD_BYTES", 256))
    work_ms: int = field(default_factory=lambda: env_int("JOB_WORK_MS", 1))
    sample_every: int = field(default_factory=lambda: max(1, env_int("SAMPLE_EVERY_S", 5)))

    def current_rate(self) -> int:
        """The offered rate now: the control file's, when the harness gives one."""
        if self.rate_file:
            try:
                with open(self.rate_file) as f:
                    return int(float(f.read().strip()))
            except (OSError, ValueError):
                pass
        return self.rate


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


_emit_lock = threading.Lock()


def emit(record: dict[str, object]) -> None:
    record.setdefault("instance_id", env_int("BENCH_INSTANCE_ID", 0))
    line = json.dumps(record)
    with _emit_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def descriptor(system: str, tables: list[str], version: str, url: str) -> None:
    emit(
        {
            "kind": "descriptor",
            "system": system,
            "event_tables": tables,
            "extensions": [],
            "version": version,
            "schema_version": "current",
            "db_name": url.rsplit("/", 1)[-1].split("?", 1)[0],
            "started_at": now_iso(),
        }
    )


class Latencies:
    """Pickup latencies (ms) of the last ``window`` seconds: a bounded ring, sorted on read."""

    def __init__(self, window: float = 30.0, size: int = 65536) -> None:
        self.window = window
        self._ring: collections.deque[tuple[float, float]] = collections.deque(maxlen=size)
        self._lock = threading.Lock()

    def add(self, values: list[float]) -> None:
        at = time.monotonic()
        with self._lock:
            self._ring.extend((at, v) for v in values)

    def percentiles(self) -> tuple[float, float, float]:
        cutoff = time.monotonic() - self.window
        with self._lock:
            values = sorted(v for t, v in self._ring if t >= cutoff)
        if not values:
            return 0.0, 0.0, 0.0
        n = len(values)
        return tuple(values[min(n - 1, round(p * (n - 1)))] for p in (0.5, 0.95, 0.99))  # type: ignore[return-value]


class Pacer:
    """How many jobs to offer now: the fixed rate credited on real elapsed time (the
    protocol's rule), or what tops the queue up to ``target_depth``."""

    def __init__(self, settings: Settings, depth: Callable[[], int]) -> None:
        self.settings = settings
        self.depth = depth
        self.last = time.monotonic()
        self.credit = 0.0
        self.target = float(settings.rate)

    def next_batch(self) -> int:
        s = self.settings
        time.sleep(max(0.0, s.batch_ms / 1000 - (time.monotonic() - self.last)))
        if s.mode == "depth-target":
            self.last = time.monotonic()
            self.target = 0.0
            return max(0, min(s.batch_max, s.target_depth - self.depth()))
        rate = s.current_rate()
        self.target = float(rate)
        now = time.monotonic()
        self.credit += rate * (now - self.last)
        self.last = now
        whole = min(s.batch_max, int(self.credit))
        self.credit -= whole
        return whole


@dataclass
class Counters:
    enqueued: int = 0
    completed: int = 0
    depth: int = 0
    extra: dict[str, float] = field(default_factory=dict)


def sample_forever(
    system: str,
    settings: Settings,
    counters: Counters,
    latencies: Latencies,
    pacer: Pacer,
    stop: threading.Event,
) -> None:
    """Every ``SAMPLE_EVERY_S`` (aligned to the wall clock), one record per metric."""
    every = settings.sample_every
    stop.wait(every - time.time() % every)
    last_enq, last_cmp, last = counters.enqueued, counters.completed, time.monotonic()
    while not stop.wait(every - time.time() % every):
        now = time.monotonic()
        span = max(0.001, now - last)
        p50, p95, p99 = latencies.percentiles()
        metrics: list[tuple[str, float, float]] = [
            ("claim_p50_ms", p50, 30.0),
            ("claim_p95_ms", p95, 30.0),
            ("claim_p99_ms", p99, 30.0),
            ("enqueue_rate", (counters.enqueued - last_enq) / span, float(every)),
            ("completion_rate", (counters.completed - last_cmp) / span, float(every)),
            ("queue_depth", float(counters.depth), 0.0),
            ("producer_target_rate", pacer.target, 0.0),
        ]
        metrics += [(name, value, 0.0) for name, value in counters.extra.items()]
        last_enq, last_cmp, last = counters.enqueued, counters.completed, now
        at = now_iso()
        for metric, value, window in metrics:
            emit(
                {
                    "t": at, "system": system, "kind": "adapter", "subject_kind": "adapter",
                    "subject": "", "metric": metric, "value": value, "window_s": window,
                }
            )  # fmt: skip

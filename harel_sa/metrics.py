"""Prometheus metrics for a worker and its queue (``pip install "harel-sa[metrics]"``):
:class:`WorkerMetrics` (an :class:`~harel_sa.worker.Observer`), :class:`QueueCollector` (gauges
read from ``transport.stats()`` at each scrape) and :func:`serve` (the HTTP endpoint). Usage::

    registry = prometheus_client.CollectorRegistry()
    metrics = WorkerMetrics(registry)
    registry.register(QueueCollector(queue))
    serve(9464, registry)
    Worker(queue, handle, observer=metrics).run()
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from socketserver import ThreadingMixIn
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

try:
    from prometheus_client import CollectorRegistry, Counter, Histogram, make_wsgi_app
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ImportError as missing:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "harel_sa.metrics needs prometheus_client: pip install 'harel-sa[metrics]'"
    ) from missing

from harel_sa.models import Stats
from harel_sa.worker import Observer, WorkerStats

__all__ = ["QueueCollector", "WorkerMetrics", "serve"]

_COUNTS = {
    "claimed": "Leases the worker received.",
    "succeeded": "Handlers that returned and whose ack took (or that acked themselves).",
    "failed": "Handlers that raised an error (retried after the backoff, or dead-lettered).",
    "retried": "Handlers that raised Retry (or nacked their lease themselves).",
    "dead_lettered": "Messages the worker moved to the dead table.",
    "dead_at_claim": "Messages the worker's claims moved to the dead table (undecodable, or "
    "delivered max_deliveries times).",
    "lost": "Leases found lost (an extend, ack or nack that returned False).",
    "released": "Leases given back with nack(0) when stopping.",
}
_SECONDS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0)


class WorkerMetrics(Observer):
    """A worker's counters and histograms in ``registry``; pass it as ``observer=``. Counters
    of what the worker did (``harel_sa_worker_<what>_total`` for each field of
    :class:`~harel_sa.worker.WorkerStats`) and histograms of handler durations and claim
    latencies."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._counters = {
            what: Counter(f"harel_sa_worker_{what}", help, registry=registry)
            for what, help in _COUNTS.items()
        }
        assert set(self._counters) == {f for f in WorkerStats.__dataclass_fields__}
        self._handler = Histogram(
            "harel_sa_worker_handler_duration_seconds",
            "How long handlers ran, whatever they ended with.",
            buckets=_SECONDS,
            registry=registry,
        )
        self._claim = Histogram(
            "harel_sa_worker_claim_duration_seconds",
            "How long claims that returned a lease took (fused ack-and-claims included).",
            buckets=_SECONDS,
            registry=registry,
        )

    def count(self, what: str) -> None:
        self._counters[what].inc()

    def claim_latency(self, seconds: float) -> None:
        self._claim.observe(seconds)

    def handler_duration(self, seconds: float) -> None:
        self._handler.observe(seconds)


class _Stats(Protocol):
    def stats(self) -> Stats: ...


class QueueCollector(Collector):
    """The queue's depth and age, read with ``stats()`` from a sync transport at each scrape:
    messages by state (ready, leased, parked), dead messages, groups, the oldest ready message's
    age (when its event carries a ``created_time``), messages ever published, live leases per
    worker, the pauses in force and the routing keys' backoff ends.

    Give it a transport of its own (the scrape runs in the HTTP server's thread).
    """

    def __init__(self, transport: _Stats) -> None:
        self.transport = transport

    def collect(self) -> Iterator[Metric]:
        s = self.transport.stats()
        by_state = GaugeMetricFamily(
            "harel_sa_queue_messages", "Messages in the queue, by state.", labels=["state"]
        )
        for state, n in (("ready", s.ready), ("leased", s.in_flight), ("parked", s.parked)):
            by_state.add_metric([state], n)
        yield by_state
        yield GaugeMetricFamily("harel_sa_queue_dead_messages", "Dead messages.", value=s.dead)
        yield GaugeMetricFamily("harel_sa_queue_groups", "Groups with messages.", value=s.groups)
        if s.oldest_ready_age is not None:
            yield GaugeMetricFamily(
                "harel_sa_queue_oldest_ready_age_seconds",
                "Seconds since the oldest ready message's event was created (created_time).",
                value=s.oldest_ready_age,
            )
        yield CounterMetricFamily(
            "harel_sa_queue_published", "Messages ever published.", value=s.published
        )
        if s.dead_rows is not None:  # PostgreSQL: what holds back VACUUM
            yield GaugeMetricFamily(
                "harel_sa_queue_dead_rows",
                "Dead rows in the queue's tables that VACUUM has not removed yet.",
                value=s.dead_rows,
            )
        if s.oldest_transaction_age is not None:
            yield GaugeMetricFamily(
                "harel_sa_oldest_transaction_age_seconds",
                "Seconds the oldest transaction open on the queue's database has run.",
                value=s.oldest_transaction_age,
            )
        leases = GaugeMetricFamily(
            "harel_sa_queue_leases", "Live leases, by worker id.", labels=["worker_id"]
        )
        for worker, n in s.leases_by_worker.items():
            leases.add_metric([worker], n)
        yield leases
        held = GaugeMetricFamily(
            "harel_sa_queue_paused",
            'Pauses in force (1), by kind (routing_key or group) and name ("": no routing key).',
            labels=["kind", "name"],
        )
        for p in s.paused:
            kind, name = (
                ("group", p.group_id) if p.group_id is not None else ("routing_key", p.routing_key)
            )
            held.add_metric([kind, name or ""], 1)
        yield held
        backoffs = GaugeMetricFamily(
            "harel_sa_queue_backoff_until_seconds",
            'When each routing key\'s backoff ends (epoch seconds; "": no routing key).',
            labels=["routing_key"],
        )
        for key, limit in s.limits.items():
            if limit.backoff_until is not None:
                backoffs.add_metric([key or ""], limit.backoff_until)
        yield backoffs


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # scrapes are not news
        pass


def serve(port: int, registry: CollectorRegistry, host: str = "0.0.0.0") -> WSGIServer:
    """Serve ``registry`` at ``http://host:port/metrics`` from a daemon thread; returns the
    server (``server.server_port`` is the port when ``port`` was 0; ``shutdown()`` ends it).
    ``harel-sa worker --metrics-port N`` uses it."""
    server = make_server(host, port, make_wsgi_app(registry), _Server, _Quiet)
    threading.Thread(target=server.serve_forever, name="harel_sa-metrics", daemon=True).start()
    return server

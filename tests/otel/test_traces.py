"""OpenTelemetry traces (``harel_sa.otel``): spans for publish, claim, handle and settle with the
messaging conventions, and the publisher's context carried in the message to a worker in
another process, whose handling span links to it; both backends, the SDK's in-memory exporter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from pydantic import BaseModel, ConfigDict
from sqlalchemy import create_engine, text

from harel_sa import Event, PostgresTransport, SqliteTransport, otel, traces
from harel_sa.outbox import Outbox

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def exported() -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.instrument(provider)
    try:
        yield exporter, provider
    finally:
        otel.uninstrument()


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'queue.db'}"
    return str(request.getfixturevalue("pg_url"))


def open_queue(url: str) -> Any:
    if url.startswith("sqlite"):
        return SqliteTransport(url)
    return PostgresTransport(url)


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def test_each_call_opens_a_span_with_the_messaging_conventions(
    exported: tuple[InMemorySpanExporter, TracerProvider], url: str
) -> None:
    exporter, _ = exported
    with open_queue(url) as q:
        q.publish("order-<1>", Event(kind="paid"))
        lease = q.claim("w1", 30)
        assert lease is not None
        assert q.nack(lease, 0)
        lease = q.claim("w1", 30)
        assert lease is not None and q.ack(lease)
    spans = exporter.get_finished_spans()
    (publish,) = by_name(spans, "publish harel")
    assert publish.kind is SpanKind.PRODUCER
    assert dict(publish.attributes or {}) == {
        "messaging.system": "harel_sa",
        "messaging.operation.type": "send",
        "messaging.operation.name": "publish",
        "messaging.destination.name": "harel",
        "messaging.harel_sa.message.group_id": "order-<1>",
    }
    claims = by_name(spans, "claim harel")
    assert len(claims) == 2
    assert {c.kind for c in claims} == {SpanKind.CLIENT}
    assert {(c.attributes or {})["messaging.operation.type"] for c in claims} == {"receive"}
    for name in ("nack harel", "ack harel"):
        (settle,) = by_name(spans, name)
        attributes = dict(settle.attributes or {})
        assert attributes["messaging.operation.type"] == "settle"
        assert attributes["messaging.message.id"] == str(lease.seq)
        assert attributes["messaging.harel_sa.message.group_id"] == "order-<1>"


def test_publish_stamps_the_current_context_and_harel_still_reads_the_row(
    exported: tuple[InMemorySpanExporter, TracerProvider], tmp_path: Path
) -> None:
    from harel.spec.states import Event as HarelEvent

    exporter, provider = exported
    path = tmp_path / "queue.db"
    with SqliteTransport(path) as q, provider.get_tracer("app").start_as_current_span("request"):
        q.publish("g", Event(kind="paid", data={"n": 1}))
    (publish,) = by_name(exporter.get_finished_spans(), "publish harel")
    engine = create_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        raw = conn.execute(text("SELECT event FROM harel_transport_messages")).scalar_one()
    engine.dispose()
    _, trace_id, span_id, _ = json.loads(raw)["trace_context"]["traceparent"].split("-")
    assert (trace_id, span_id) == (
        f"{publish.context.trace_id:032x}",
        f"{publish.context.span_id:016x}",
    )
    assert HarelEvent.model_validate_json(raw).data == {"n": 1}  # harel ignores the field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str


def test_an_event_type_that_keeps_no_extra_fields_is_not_stamped(
    exported: tuple[InMemorySpanExporter, TracerProvider], tmp_path: Path
) -> None:
    with SqliteTransport(tmp_path / "q.db", event_type=Strict) as q:
        q.publish("g", Strict(kind="x"))
        lease = q.claim("w", 30)
        assert lease is not None and lease.event == Strict(kind="x")  # claimable, not dead


def test_uninstrumented_no_span_and_no_stamp(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.instrument(provider)
    otel.uninstrument()
    assert traces.active is None
    with (
        SqliteTransport(tmp_path / "q.db") as q,
        provider.get_tracer("app").start_as_current_span("r"),
    ):
        q.publish("g", Event(kind="x"))
        lease = q.claim("w", 30)
    assert lease is not None and "trace_context" not in (lease.event.model_extra or {})
    assert [s.name for s in exporter.get_finished_spans()] == ["r"]


def test_an_outbox_publish_has_one_span_in_the_application_transaction(
    exported: tuple[InMemorySpanExporter, TracerProvider], tmp_path: Path
) -> None:
    exporter, _ = exported
    path = tmp_path / "q.db"
    with SqliteTransport(path) as q:
        engine = create_engine(f"sqlite:///{path}")
        with engine.begin() as conn:
            q.publish("g", Event(kind="a"), connection=conn)
            Outbox().publish(conn, "g", Event(kind="b"))
        engine.dispose()
        assert [m.group_id for m in q.peek()] == ["g", "g"]
    assert len(by_name(exporter.get_finished_spans(), "publish harel")) == 2  # not 3


WORKER = textwrap.dedent(
    """
    import json, sys, threading
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from harel_sa import PostgresTransport, SqliteTransport, Worker, otel

    url, out = sys.argv[1], sys.argv[2]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.instrument(provider)
    queue = SqliteTransport(url) if url.startswith("sqlite") else PostgresTransport(url)
    done = threading.Event()
    inner = []

    def handle(lease):
        with provider.get_tracer("handler").start_as_current_span("inside") as span:
            inner.append(span.get_span_context().span_id)
        done.set()

    worker = Worker(queue, handle, poll_interval=0.05)
    thread = threading.Thread(target=worker.run)
    thread.start()
    assert done.wait(60)
    worker.stop()
    thread.join(60)
    queue.close()
    spans = [
        {
            "name": s.name,
            "kind": s.kind.name,
            "span_id": s.context.span_id,
            "trace_id": s.context.trace_id,
            "parent": s.parent.span_id if s.parent else None,
            "links": [[l.context.trace_id, l.context.span_id] for l in s.links],
            "attributes": dict(s.attributes or {}),
        }
        for s in exporter.get_finished_spans()
    ]
    with open(out, "w") as f:
        json.dump(spans, f)
    """
)


def test_a_worker_in_another_process_links_its_handling_to_the_publish(
    exported: tuple[InMemorySpanExporter, TracerProvider], url: str, tmp_path: Path
) -> None:
    exporter, _ = exported
    with open_queue(url) as q:
        q.publish("g1", Event(kind="paid"))  # creates the schema, too
    (publish,) = by_name(exporter.get_finished_spans(), "publish harel")
    out = tmp_path / "spans.json"
    subprocess.run(
        [sys.executable, "-c", WORKER, url, str(out)],
        check=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    spans = json.loads(out.read_text())
    (handle,) = [s for s in spans if s["name"] == "handle harel"]
    assert handle["kind"] == "CONSUMER"
    assert handle["links"] == [[publish.context.trace_id, publish.context.span_id]]
    assert handle["trace_id"] != publish.context.trace_id  # linked, not parented
    assert handle["attributes"]["messaging.operation.type"] == "process"
    assert handle["attributes"]["messaging.harel_sa.message.group_id"] == "g1"
    (inside,) = [s for s in spans if s["name"] == "inside"]
    assert inside["parent"] == handle["span_id"]  # the handler's own spans nest under it
    acks = [s for s in spans if s["attributes"].get("messaging.operation.type") == "settle"]
    fused = [s for s in spans if s["name"] == "ack_and_claim harel"]
    assert acks or fused  # the ack was traced, alone or fused with the next claim


def test_without_the_extra_the_import_says_which_to_install() -> None:
    blocked = "import sys; sys.modules['opentelemetry'] = None\nimport harel_sa.otel"
    done = subprocess.run(
        [sys.executable, "-c", blocked],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 1
    assert "pip install 'harel-sa[otel]'" in done.stderr

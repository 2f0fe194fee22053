"""OpenTelemetry traces of the queue (``pip install 'harel-sa[otel]'``).

:func:`instrument` turns them on for the process, :func:`uninstrument` off. Spans follow the
messaging semantic conventions: ``messaging.system`` ``harel_sa``, ``messaging.operation.type``
(``send``, ``receive``, ``process``, ``settle``) and ``messaging.operation.name`` (the call),
``messaging.destination.name`` the prefix, ``messaging.harel_sa.message.group_id`` the group.
A publish stamps the current trace context on the event (``trace_context``, a field the harel
engine's ``Event`` ignores and harel_sa's ``Event`` keeps; an event type that keeps no extra
fields is left as it is), and a worker's handler runs in a ``process`` span linked to it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import BaseModel

from harel_sa import traces
from harel_sa.events import Lease
from harel_sa.lazy import missing_extra

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Link, SpanKind, Tracer, TracerProvider
except ModuleNotFoundError as exc:  # the extra is not installed: say which
    raise missing_extra("harel_sa.otel", "otel", exc.name) from exc

#: The event field that carries the publisher's trace context (W3C ``traceparent``...).
FIELD = "trace_context"
SYSTEM = "harel_sa"

# operation name -> (messaging.operation.type, span kind)
_KINDS = {
    "publish": ("send", SpanKind.PRODUCER),
    "publish_many": ("send", SpanKind.PRODUCER),
    "claim": ("receive", SpanKind.CLIENT),
    "claim_many": ("receive", SpanKind.CLIENT),
    "ack_and_claim": ("receive", SpanKind.CLIENT),
    "ack_many_and_claim_many": ("receive", SpanKind.CLIENT),
    "ack": ("settle", SpanKind.CLIENT),
    "ack_many": ("settle", SpanKind.CLIENT),
    "nack": ("settle", SpanKind.CLIENT),
    "dead_letter": ("settle", SpanKind.CLIENT),
}


class OpenTelemetry:
    """:class:`harel_sa.traces.Tracing` on an OpenTelemetry tracer."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    @contextmanager
    def span(
        self,
        operation: str,
        prefix: str,
        *,
        group_id: str | None = None,
        leases: tuple[Lease[Any], ...] = (),
    ) -> Iterator[object]:
        kind_of, kind = _KINDS.get(operation, ("settle", SpanKind.CLIENT))
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": kind_of,
            "messaging.operation.name": operation,
            "messaging.destination.name": prefix,
        }
        if group_id is not None:
            attributes["messaging.harel_sa.message.group_id"] = group_id
        if len(leases) == 1:
            attributes["messaging.message.id"] = str(leases[0].seq)
            attributes["messaging.harel_sa.message.group_id"] = leases[0].group_id
        elif leases:
            attributes["messaging.batch.message_count"] = len(leases)
        with self.tracer.start_as_current_span(
            f"{operation} {prefix}", kind=kind, attributes=attributes
        ) as span:
            yield span

    @contextmanager
    def processing(self, prefix: str, lease: Lease[Any]) -> Iterator[object]:
        links = []
        carrier = _carrier(lease.event)
        if carrier:
            published = trace.get_current_span(propagate.extract(carrier)).get_span_context()
            if published.is_valid:
                links.append(Link(published))
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "handle",
            "messaging.destination.name": prefix,
            "messaging.message.id": str(lease.seq),
            "messaging.harel_sa.message.group_id": lease.group_id,
            "messaging.message.delivery_count": lease.deliveries,
        }
        with self.tracer.start_as_current_span(
            f"handle {prefix}", kind=SpanKind.CONSUMER, attributes=attributes, links=links
        ) as span:
            yield span

    def stamp(self, event_json: str, event_type: type[BaseModel]) -> str:
        if event_type.model_config.get("extra") != "allow":
            return event_json
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        if not carrier:
            return event_json
        fields = json.loads(event_json)
        fields[FIELD] = carrier
        return json.dumps(fields, ensure_ascii=False, separators=(",", ":"))


def _carrier(event: BaseModel) -> dict[str, str] | None:
    extra = event.model_extra or {}
    found = extra.get(FIELD)
    if isinstance(found, dict) and all(isinstance(v, str) for v in found.values()):
        return found
    return None


def instrument(tracer_provider: TracerProvider | None = None) -> None:
    """Trace every transport, outbox and worker of this process from now on, on
    ``tracer_provider`` (default: the global one)."""
    from importlib.metadata import version

    tracer = trace.get_tracer("harel_sa", version("harel-sa"), tracer_provider=tracer_provider)
    traces.active = OpenTelemetry(tracer)


def uninstrument() -> None:
    """Stop tracing; later calls open no spans."""
    traces.active = None

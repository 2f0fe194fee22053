"""How a worker learns that its handler settled its own lease (acked, nacked, dead-lettered).

A worker sets a watcher in a context variable (:data:`watch`) in each of its slots' threads
(``Worker``) or tasks (``AsyncWorker``; tasks a handler starts copy it) for the slot's life,
and makes its own calls there unwatched; the transports :func:`report` every ``ack``,
``nack`` and ``dead_letter`` that took. So what is reported to a worker is what its handlers
did, and nothing else. Unwatched, the cost is one context-variable lookup per settle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextvars import ContextVar, Token
from typing import Any, Literal

from harel_sa.events import Lease

How = Literal["acked", "nacked", "dead_lettered"]
Watcher = Callable[[Lease[Any], How, float], None]

_watcher: ContextVar[Watcher | None] = ContextVar("harel_sa_settlements", default=None)


def report(lease: Lease[Any], how: How, delay: float = 0.0) -> None:
    """``lease`` was settled (``how``; ``delay`` of a nack) by a call that took."""
    watcher = _watcher.get()
    if watcher is not None:
        watcher(lease, how, delay)


def report_acks(leases: Iterable[Lease[Any]], acked: Iterable[bool]) -> None:
    """The acks of a batch: each lease whose ack took is reported as ``"acked"``."""
    if _watcher.get() is None:
        return
    for lease, took in zip(leases, acked, strict=True):
        if took:
            report(lease, "acked")


#: Report the settles made in this context (and in tasks started from it) to a watcher:
#: ``token = watch(watcher)``, and ``unwatch(token)`` in a ``finally``. The context variable's
#: own methods, not a context manager: a worker unwatches once per call of its own, and a
#: context manager's three Python calls cost more than the handler of a quick message.
watch: Callable[[Watcher | None], Token[Watcher | None]] = _watcher.set
unwatch: Callable[[Token[Watcher | None]], None] = _watcher.reset

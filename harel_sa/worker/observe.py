"""What a worker reports as it goes: the hook metrics plug into (``harel_sa.metrics``)."""

from __future__ import annotations


class Observer:
    """Told what a worker does, as it does it; every method here does nothing.

    Subclass it and pass ``observer=`` to a worker. The methods are called from the worker's
    threads (``Worker``), or from its event loop and its heartbeat thread (``AsyncWorker``),
    so they must be quick and thread-safe; an exception they raise stops the worker.
    """

    def count(self, what: str) -> None:
        """One more of ``what``, a field of :class:`~harel_sa.worker.WorkerStats`
        (``claimed``, ``succeeded``, ``failed``, ``retried``, ``dead_lettered``, ``lost``,
        ``released``)."""

    def claim_latency(self, seconds: float) -> None:
        """A claim (or the claim half of a fused ack-and-claim; with batching, a batch that
        claimed, once for all its leases) took ``seconds``."""

    def handler_duration(self, seconds: float) -> None:
        """A handler ran for ``seconds``, whatever it ended with."""

"""The transport calls a worker makes, each a value that performs itself on either transport.

Decided by :class:`~harel_sa.worker.runstate.RunState`, performed by a driver: ``op.on(t)``
on a sync transport, ``await op.on_async(t)`` on an async one; both make the same public call
and answer a :class:`Done` (a batch, :class:`Sent`). A :data:`Settle` also says its leases, its
claims, and itself without them (a retry once stopping).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self, TypeAlias

from harel_sa.errors import BusyError, ConnectionLostError
from harel_sa.events import Lease

if TYPE_CHECKING:
    from harel_sa.async_transports import AsyncTransport
    from harel_sa.transports import Transport
    from harel_sa.worker.options import WorkerOptions

    #: The transports a ``Worker`` drives, and those an ``AsyncWorker`` awaits: any dialect's.
    WorkerTransport: TypeAlias = Transport[Any]
    AsyncWorkerTransport: TypeAlias = AsyncTransport[Any]


#: The errors after which a settle (or a batch of acks) is sent again, after ``poll_interval``:
#: a busy write lock, and a connection lost mid-call (fenced by its token, a settle sent twice
#: acts once).
RETRIED = (BusyError, ConnectionLostError)


@dataclass(frozen=True, slots=True)
class Done:
    """What a call returned: whether it took (``ok``) and the lease it claimed, if any."""

    ok: bool
    lease: Lease[Any] | None = None


@dataclass(frozen=True, slots=True)
class Claim:
    """Claim the next message with the worker's options."""

    options: WorkerOptions
    name = "Claim"

    def on(self, t: WorkerTransport) -> Done:
        return Done(True, t.claim(**self.options.claim_args()))

    async def on_async(self, t: AsyncWorkerTransport) -> Done:
        return Done(True, await t.claim(**self.options.claim_args()))


class OneLease:
    """A settle of one lease, with no claim (an :class:`Ack` may add one)."""

    __slots__ = ()
    lease: Lease[Any]

    @property
    def leases(self) -> tuple[Lease[Any], ...]:
        return (self.lease,)

    @property
    def claims(self) -> int:
        return 0

    def without_claim(self) -> Self:
        return self


@dataclass(frozen=True, slots=True)
class Ack(OneLease):
    """Ack ``lease``; ``fused``: and claim the next message in the same transaction."""

    lease: Lease[Any]
    options: WorkerOptions
    fused: bool

    @property
    def name(self) -> str:
        return "AckAndClaim" if self.fused else "Ack"

    @property
    def claims(self) -> int:
        return int(self.fused)

    def without_claim(self) -> Ack:
        return Ack(self.lease, self.options, fused=False)

    def on(self, t: WorkerTransport) -> Done:
        if self.fused:
            return Done(*t.ack_and_claim(self.lease, **self.options.claim_args()))
        return Done(t.ack(self.lease))

    async def on_async(self, t: AsyncWorkerTransport) -> Done:
        if self.fused:
            return Done(*await t.ack_and_claim(self.lease, **self.options.claim_args()))
        return Done(await t.ack(self.lease))


@dataclass(frozen=True, slots=True)
class Nack(OneLease):
    """Give ``lease`` back after ``delay`` seconds (``release``: at the end, ``nack(0)``)."""

    lease: Lease[Any]
    delay: float
    release: bool = False
    name = "Nack"

    def on(self, t: WorkerTransport) -> Done:
        return Done(t.nack(self.lease, self.delay))

    async def on_async(self, t: AsyncWorkerTransport) -> Done:
        return Done(await t.nack(self.lease, self.delay))


@dataclass(frozen=True, slots=True)
class Bury(OneLease):
    """Move ``lease``'s message to the dead table with ``reason``."""

    lease: Lease[Any]
    reason: str
    name = "DeadLetter"

    def on(self, t: WorkerTransport) -> Done:
        return Done(t.dead_letter(self.lease, self.reason))

    async def on_async(self, t: AsyncWorkerTransport) -> Done:
        return Done(await t.dead_letter(self.lease, self.reason))


#: What may follow a handler.
Verdict = Ack | Nack | Bury


@dataclass(frozen=True, slots=True)
class Sent:
    """What a batch returned: for each of its acks whether it took, and the leases it claimed."""

    acked: tuple[bool, ...]
    leases: tuple[Lease[Any], ...]


@dataclass(frozen=True, slots=True)
class Batch:
    """Ack ``leases`` and claim up to ``limit`` more with the worker's options, in one write
    transaction: ``claim_many`` (no acks), ``ack_many`` (no claims) or both fused."""

    leases: tuple[Lease[Any], ...]
    options: WorkerOptions
    limit: int

    @property
    def name(self) -> str:
        if not self.leases:
            return "ClaimMany"
        return "AckManyAndClaimMany" if self.limit else "AckMany"

    @property
    def claims(self) -> int:
        return self.limit

    def without_claim(self) -> Batch | None:
        """The acks alone (``None``: there are none)."""
        return Batch(self.leases, self.options, 0) if self.leases else None

    def on(self, t: WorkerTransport) -> Sent:
        args = self.options.claim_args()
        if not self.leases:
            return Sent((), tuple(t.claim_many(limit=self.limit, **args)))
        if not self.limit:
            return Sent(tuple(t.ack_many(self.leases)), ())
        acked, claimed = t.ack_many_and_claim_many(self.leases, limit=self.limit, **args)
        return Sent(tuple(acked), tuple(claimed))

    async def on_async(self, t: AsyncWorkerTransport) -> Sent:
        args = self.options.claim_args()
        if not self.leases:
            return Sent((), tuple(await t.claim_many(limit=self.limit, **args)))
        if not self.limit:
            return Sent(tuple(await t.ack_many(self.leases)), ())
        acked, claimed = await t.ack_many_and_claim_many(self.leases, limit=self.limit, **args)
        return Sent(tuple(acked), tuple(claimed))


#: What is sent again after a busy lock or a lost connection (fenced by tokens: a settle sent
#: twice acts once).
Settle = Ack | Nack | Bury | Batch

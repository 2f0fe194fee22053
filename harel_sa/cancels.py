"""What an async transport does when its caller is cancelled mid-call, for every backend.

A call handed to the database runs to its end (a claim's lease may commit whatever the caller
does); when the caller is cancelled meanwhile, :func:`shielded` waits for that end, gives back
every lease the call took (the caller will never see it: uncounted, so the message need not wait
for its lease to lapse and ``max_deliveries`` counts only deliveries a caller received), then
lets the cancellation through.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any, TypeVar

from harel_sa.errors import HarelSAError
from harel_sa.events import Lease

T = TypeVar("T")


async def shielded(call: Awaitable[T], give_back: Callable[[Lease[Any]], Awaitable[object]]) -> T:
    """``call``'s result; if the caller is cancelled first, ``call`` still finishes, each lease
    in its result is handed to ``give_back``, and :class:`asyncio.CancelledError` is raised.
    A give-back that fails leaves the lease to lapse, as a crashed worker's does. A future is
    shielded as it is; a coroutine runs in a task of its own."""
    done = asyncio.ensure_future(call)
    try:
        return await asyncio.shield(done)
    except asyncio.CancelledError:
        result = await finish(done)
        for taken in leases_taken(result):
            with suppress(HarelSAError):
                await give_back(taken)
        raise


async def finish(done: asyncio.Future[T]) -> T | None:
    """``done``'s result once it completes, waiting through further cancellations; ``None`` if
    it failed or was cancelled itself."""
    while not done.done():
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            continue
    return None if done.cancelled() or done.exception() else done.result()


def leases_taken(result: object) -> list[Lease[Any]]:
    """The leases a claiming call's ``result`` holds: a claim's lease, the second half of an
    ``ack_and_claim``, the list of a ``claim_many`` or of an ``ack_many_and_claim_many``."""
    if isinstance(result, tuple) and len(result) == 2:  # (acked, taken) of the fused calls
        result = result[1]
    if isinstance(result, Lease):
        return [result]
    if isinstance(result, list):
        return [lease for lease in result if isinstance(lease, Lease)]
    return []

"""What an async transport does when its caller is cancelled mid-call, for every backend.

A call handed to the database runs to its end (a claim's lease may commit whatever the caller
does); when the caller is cancelled meanwhile, every lease the call took is given back,
uncounted (the caller will never see it: the message need not wait for its lease to lapse, and
``max_deliveries`` counts only deliveries a caller received), then the cancellation goes
through. :func:`shielded` runs the call apart from its caller (a future as it is, a coroutine in
a task of its own); :func:`settled` runs it in its caller's own task, with no task per call, for
a driver whose waits carry on through a cancellation, then raise :class:`Finished`
(:func:`harel_sa.postgres.wire.wait_async`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
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
        await give_back_all(result, give_back)
        raise


class Finished(BaseException):
    """Raised instead of ``cancelled`` (the caller's cancellation, which came while its call
    ran on to its end): ``result`` is what the call returned, its leases to be given back. A
    ``BaseException``, as the cancellation it stands for: no ``except Exception`` takes it."""

    def __init__(self, result: object, cancelled: asyncio.CancelledError) -> None:
        super().__init__("the call finished after its caller was cancelled")
        self.result = result
        self.cancelled = cancelled


async def settled(call: Awaitable[T], give_back: Callable[[Lease[Any]], Awaitable[object]]) -> T:
    """``call``'s result, ``call`` awaited in the caller's task; when it raises
    :class:`Finished`, each lease in its result is handed to ``give_back``, then the
    cancellation itself is raised (an ``asyncio.timeout`` knows its own by the exact class),
    as :func:`shielded` does."""
    try:
        return await call
    except Finished as finished:
        await give_back_all(finished.result, give_back)
        raise finished.cancelled from None


async def give_back_all(
    result: object, give_back: Callable[[Lease[Any]], Awaitable[object]]
) -> None:
    """Hand each lease in ``result`` to ``give_back``: all of them, through failures and
    through a further cancellation (raised once they were all handed; a give-back that ran to
    its end through it raises its :class:`Finished`, whose cancellation that is)."""
    again: asyncio.CancelledError | None = None
    for taken in leases_taken(result):
        try:
            await give_back(taken)
        except HarelSAError:
            pass  # the lease lapses, as a crashed worker's does
        except asyncio.CancelledError as error:
            again = error
        except Finished as finished:
            again = finished.cancelled
    if again is not None:
        raise again


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

"""The AsyncWorker batcher's bell (``harel_sa.worker.tasks.AsyncBell``), on a real loop: a ring
wakes the waiter or the next wait, a timeout ends a wait quietly, and a cancelled wait
leaves no timer behind."""

from __future__ import annotations

import asyncio

import pytest

from harel_sa.worker.tasks import AsyncBell

LONG = 30.0  # a wait the test never lets run out


def test_a_ring_wakes_the_waiter_at_once() -> None:
    async def main() -> None:
        bell = AsyncBell()
        waiting = asyncio.ensure_future(bell.wait(LONG))
        await asyncio.sleep(0)
        assert not waiting.done()
        bell.set()
        await asyncio.wait_for(waiting, 5.0)  # long before LONG
        assert bell.is_set()
        bell.clear()
        assert not bell.is_set()

    asyncio.run(main())


def test_a_ring_before_the_wait_is_not_lost() -> None:
    async def main() -> None:
        bell = AsyncBell()
        bell.set()
        await asyncio.wait_for(bell.wait(LONG), 5.0)  # returns at once: rung already

    asyncio.run(main())


def test_a_timeout_ends_the_wait_without_an_error_and_without_a_ring() -> None:
    async def main() -> None:
        bell = AsyncBell()
        await asyncio.wait_for(bell.wait(0.01), 5.0)  # the guard: a mutant fails, not hangs
        assert not bell.is_set()

    asyncio.run(main())


def test_a_cancelled_wait_leaves_no_timer_and_a_later_wait_still_hears_a_ring() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        bell = AsyncBell()
        before = len(loop._scheduled)  # type: ignore[attr-defined]
        waiting = asyncio.ensure_future(bell.wait(LONG))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        live = [t for t in loop._scheduled if not t.cancelled()]  # type: ignore[attr-defined]
        assert len(live) <= before
        again = asyncio.ensure_future(bell.wait(LONG))
        await asyncio.sleep(0)
        bell.set()
        await asyncio.wait_for(again, 5.0)

    asyncio.run(main())

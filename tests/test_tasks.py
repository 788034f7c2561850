"""Stopping background tasks within a bound, even when one loses its cancellation."""

from __future__ import annotations

import asyncio

import pytest

from nats_scheduler.tasks import cancel_and_wait

pytestmark = pytest.mark.anyio


async def test_a_task_that_lost_its_first_cancellation_is_cancelled_again() -> None:
    lost = asyncio.Event()

    async def loop_losing_one_cancel() -> None:
        """As a loop around 3.11's wait_for may: the first cancellation is swallowed."""
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            lost.set()
        await asyncio.Event().wait()  # goes on; the second cancellation ends it

    task = asyncio.create_task(loop_losing_one_cancel())
    await asyncio.sleep(0)
    assert await cancel_and_wait([task], timeout=5.0) == set()
    assert lost.is_set() and task.cancelled()


async def test_a_task_that_never_ends_is_given_up_at_the_timeout() -> None:
    stubborn_now = True

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                if not stubborn_now:
                    raise

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    began = loop.time()
    assert await cancel_and_wait([task], timeout=0.3) == {task}
    assert loop.time() - began < 2.0 and not task.done()
    stubborn_now = False  # leave nothing running behind the test
    assert await cancel_and_wait([task], timeout=2.0) == set()

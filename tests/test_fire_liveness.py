"""A busy process still fires: stale Schedule reads are retried, but not forever."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from nats_scheduler.seam import RunPayload, RunState, Schedule
from tests.harness.servers import unique_prefix
from tests.providers import eventually, running

pytestmark = pytest.mark.anyio


class CrawlingClock:
    """Every reading is 0.3 s after the previous one: each Schedule read looks stale by the
    time its create would leave, as on a process starved for CPU.

    Elapsed time (``sleep``, what periodic loops wait on) passes as it does for any process:
    only the readings crawl. Without it every renewal, sweep and retention loop would spin
    at the event loop's pace, a load no real process produces."""

    def __init__(self) -> None:
        self._now = datetime(2031, 2, 1, tzinfo=UTC)

    def now(self) -> datetime:
        self._now += timedelta(seconds=0.3)
        return self._now

    async def sleep_until(self, instant: datetime) -> None:
        await asyncio.sleep(0.01)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


async def test_fire_due_terminates_and_stores_the_run_when_every_read_is_stale(
    nats_url: str,
) -> None:
    clock = CrawlingClock()
    async with running(nats_url, unique_prefix(), clock=clock, store_retry_seconds=0.5,
                       lease_seconds=3600.0) as provider:
        await provider.apply(Schedule("busy", "busy", "0 3 1 1 *", "UTC", True,
                                      RunPayload("t", "p"), 1))
        run = await asyncio.wait_for(
            provider.fire_due("busy", datetime(2032, 1, 1, 3, tzinfo=UTC)), 10)
        assert run is not None and provider.stale_fires >= 1
        # stored after the Schedule's last change and never paused: the pause check lets it run
        async def dispatched() -> bool:
            return (await provider.get_run(run.run_id)).state == RunState.DISPATCHED

        try:
            await eventually(dispatched)
        except AssertionError:
            stored = await provider.get_run(run.run_id)
            raise AssertionError(f"not dispatched: {stored!r}") from None

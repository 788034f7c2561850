"""One Run per due time, whatever the timing: many fire_due calls from several providers."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

import pytest

from nats_scheduler.core import calendar
from nats_scheduler.seam import RunPayload, RunState, Schedule
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.servers import unique_prefix
from tests.providers import eventually, running

pytestmark = pytest.mark.anyio


async def test_concurrent_fire_due_from_several_providers_yields_one_run_each(
    nats_url: str,
) -> None:
    prefix = unique_prefix()
    handler = RecordingRunHandler()
    async with contextlib.AsyncExitStack() as stack:
        providers = [await stack.enter_async_context(running(nats_url, prefix, handler))
                     for _ in range(4)]
        schedule = Schedule("storm", "storm", "*/7 3 * * *", "America/New_York", True,
                            RunPayload("t", "p"), 1)
        await providers[0].apply(schedule)
        window = (datetime(2031, 5, 1, tzinfo=UTC), datetime(2031, 5, 3, tzinfo=UTC))
        dues = calendar.due_times(schedule.cron, schedule.timezone, *window)
        assert len(dues) == 18
        calls = [p.fire_due("storm", due) for due in dues for p in providers for _ in range(5)]
        runs = await asyncio.gather(*calls)
        by_due: dict[datetime, set[str]] = {}
        for run in runs:
            assert run is not None
            by_due.setdefault(run.due_at, set()).add(run.run_id)  # type: ignore[arg-type]
        assert sorted(by_due) == dues
        assert all(len(ids) == 1 for ids in by_due.values())

        async def all_dispatched() -> list:
            listed = await providers[1].list_runs("storm", limit=100)
            return listed if len(listed) == 18 and all(
                r.state == RunState.DISPATCHED for r in listed) else []

        deadline = asyncio.get_running_loop().time() + 20
        while not await all_dispatched():
            assert asyncio.get_running_loop().time() < deadline, "runs not dispatched"
            await asyncio.sleep(0.02)
        for ids in by_due.values():
            (run_id,) = ids
            assert handler.sessions_created(run_id) == 1
        # every provider's ledger converges on the same history
        expected = [r.run_id for r in await providers[1].list_runs("storm", limit=100)]
        for p in providers:
            async def same(p=p) -> bool:
                return [r.run_id for r in await p.list_runs("storm", limit=100)] == expected
            await eventually(same)

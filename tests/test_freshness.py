"""One leader read proves the Schedule table current for every firing (runtime/freshness.py).

Firing decides on the Schedule table instead of a leader read per Schedule; these tests pin
what makes that as safe as the reads it replaces: a change stored elsewhere before the
confirmation is in the table when it returns, a lagging table is never "proven", callers
share one request, and a caller that needs a confirmation newer than its own start gets one.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from nats_scheduler import ManualClock
from nats_scheduler.runtime.freshness import Freshness
from nats_scheduler.seam import RunPayload, Schedule
from tests.harness.servers import unique_prefix
from tests.providers import running

pytestmark = pytest.mark.anyio


def schedule(deployment_id: str, *, enabled: bool = True, version: int = 1) -> Schedule:
    return Schedule(deployment_id, deployment_id, "0 3 * * *", "UTC", enabled,
                    RunPayload("t", "p"), version)


async def test_a_change_stored_elsewhere_is_in_the_table_once_confirmed(nats_url: str) -> None:
    prefix = unique_prefix()
    async with running(nats_url, prefix) as reader, running(nats_url, prefix) as writer:
        await writer.apply(schedule("fresh"))
        await writer.apply(schedule("fresh", enabled=False, version=2))
        assert reader.firing is not None and reader.firing.freshness is not None
        proven = await reader.firing.freshness.confirm()
        assert proven is not None
        record = reader.firing.table.get("fresh") if reader.firing.table else None
        assert record is not None and not record.enabled, "the pause stored before the " \
            "confirmation must be in the table when it returns"


async def test_a_table_behind_the_leader_is_never_proven(nats_url: str) -> None:
    prefix = unique_prefix()
    async with running(nats_url, prefix) as provider:
        await provider.apply(schedule("lagging"))
        freshness = Freshness(provider.store, lambda: 0, ManualClock(datetime.now(UTC)))
        assert await freshness.confirm() is None


async def test_concurrent_callers_share_one_leader_read(nats_url: str) -> None:
    prefix = unique_prefix()
    async with running(nats_url, prefix) as provider:
        await provider.apply(schedule("shared"))
        assert provider.firing is not None and provider.firing.freshness is not None
        freshness = provider.firing.freshness
        before = freshness.confirmations
        results = await asyncio.gather(*(freshness.confirm() for _ in range(50)))
        assert all(result is not None for result in results)
        assert freshness.confirmations - before == 1


async def test_a_caller_needing_a_newer_confirmation_gets_one(nats_url: str) -> None:
    prefix = unique_prefix()
    clock = ManualClock(datetime.now(UTC))
    async with running(nats_url, prefix, clock=clock) as provider:
        await provider.apply(schedule("newer"))
        assert provider.firing is not None and provider.firing.freshness is not None
        freshness = provider.firing.freshness
        first = await freshness.confirm()
        before = freshness.confirmations
        # within the reuse window by both clocks: the same confirmation serves
        assert await freshness.confirm(reuse=60.0) == first
        assert freshness.confirmations == before
        # a confirmation older than the caller itself never serves it
        await freshness.confirm(since=asyncio.get_running_loop().time())
        assert freshness.confirmations == before + 1
        # nor one that is old by the injected clock, however recent by the event loop's
        clock.advance(timedelta(seconds=1))
        later = await freshness.confirm(reuse=0.5)
        assert later is not None and first is not None and later > first

"""A replica on a host clock minutes off stamps and counts by the store's clock.

Due times count from two instants: when the process started (``Runtime.began``) and when
the Schedule last changed (``updated_at``). Read from a host clock ten minutes ahead, both
would skip ten minutes of due times; ten minutes behind, a restart would backfill ten of
them (a ``* * * * *`` Schedule's due times since "ten minutes ago"). So both are the store's
time: the provider stamps with the runtime's clock, and ``began`` is read again once the
first sample of the store's clock is in (docs/architecture.md, "One clock: the store's").
A real server, one in-process provider at a time: no minute boundary is waited for.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nats_scheduler.core import calendar
from nats_scheduler.seam import RunPayload, Schedule
from tests.harness.clocks import OffsetClock
from tests.harness.servers import unique_prefix
from tests.providers import running

pytestmark = pytest.mark.anyio

TEN_MINUTES = 600.0
CLOSE = timedelta(seconds=1)
"""How near the true time a stamp must be: a loopback round trip is milliseconds."""


def every_minute(deployment: str) -> Schedule:
    return Schedule(deployment, deployment, "* * * * *", "UTC", True,
                    RunPayload("agent", "tick"), 1)


def next_boundaries(start: datetime, end: datetime) -> set[datetime]:
    """The due time next after ``start`` and after ``end`` (the same unless a minute ends
    between them)."""
    return {due for at in (start, end)
            if (due := calendar.next_due("* * * * *", "UTC", at)) is not None}


@pytest.mark.parametrize("offset", [TEN_MINUTES, -TEN_MINUTES],
                         ids=["10min-ahead", "10min-behind"])
async def test_a_replica_ten_minutes_off_neither_skips_nor_backfills(
    nats_url: str, offset: float,
) -> None:
    prefix = unique_prefix()
    before = datetime.now(UTC)
    async with running(nats_url, prefix, clock=OffsetClock(offset)) as provider:
        await provider.until_ready()
        runtime = provider.runtime
        assert runtime is not None
        assert abs(runtime.began - before) < CLOSE, (runtime.began, before)
        applied_from = datetime.now(UTC)
        await provider.apply(every_minute("tick"))
        applied_to = datetime.now(UTC)
        record = provider.schedules.get("tick")
        assert record is not None
        assert applied_from - CLOSE <= record.updated_at <= applied_to + CLOSE, record.updated_at
        ticker = provider.ticker
        assert ticker is not None
        assert ticker.next_due("tick") in next_boundaries(applied_from, applied_to)

    # a restart on the same host: the Schedule loads, and its due times count from the
    # process's start by the store's clock
    restarted = datetime.now(UTC)
    async with running(nats_url, prefix, clock=OffsetClock(offset)) as provider:
        await provider.until_ready()
        ready = datetime.now(UTC)
        runtime, ticker = provider.runtime, provider.ticker
        assert runtime is not None and ticker is not None
        assert abs(runtime.began - restarted) < CLOSE, (runtime.began, restarted)
        assert ticker.next_due("tick") in next_boundaries(restarted, ready)
        # nothing from the minutes before either process started
        runs = await provider.list_runs("tick", limit=50)
        assert all(r.due_at is not None and r.due_at >= before for r in runs), runs

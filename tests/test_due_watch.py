"""The due-time metrics on a real server: skipped by reason, unexplained, each counted once.

A provider on a hand-moved clock stores the Runs of some due times (``fire_due``) and not
others; a pass of :class:`~nats_scheduler.runtime.due_watch.DueWatch` over the minutes that
passed counts a disabled Schedule's and a held one's due times as skipped, and the due
time of an active Schedule left without a Run as unexplained, whether its Runs are in this
process's ledger or only in the store.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nats_scheduler.clock import ManualClock
from nats_scheduler.projections.ledger import Ledger
from nats_scheduler.runtime.due_watch import DueWatch
from nats_scheduler.runtime.metrics import Metrics
from nats_scheduler.seam import RunPayload, Schedule
from tests.harness.servers import unique_prefix
from tests.providers import running

pytestmark = pytest.mark.anyio

T0 = datetime(2030, 1, 1, 2, 0, 30, tzinfo=UTC)


def schedule(dep: str, *, enabled: bool = True) -> Schedule:
    return Schedule(dep, dep, "* * * * *", "UTC", enabled, RunPayload("t", "p"), 1)


@pytest.mark.parametrize("ledger", ["the process's", "empty: only the store knows"])
async def test_a_pass_counts_skips_by_reason_and_the_unexplained(nats_url: str,
                                                                 ledger: str) -> None:
    clock = ManualClock(T0)
    async with running(nats_url, unique_prefix(), clock=clock) as provider:
        for dep, enabled in (("active", True), ("off", False), ("paused", True)):
            await provider.apply(schedule(dep, enabled=enabled))
        await provider.hold("paused", by="ana@ops", reason="db migration")
        # the clock stays put (the ticker fires nothing); the pass is told the time
        for minute in (1, 3):  # 02:02 is left without a Run
            assert await provider.fire_due("active", T0.replace(minute=minute, second=0))
        runtime = provider.runtime
        assert runtime is not None
        metrics = Metrics.disabled()
        watch = DueWatch(runtime.table, runtime.ledger if ledger == "the process's" else Ledger(),
                         runtime.history, clock, metrics, owns=lambda _dep, _due: True)
        watch.start_at(T0)
        await watch.run_pass(T0 + timedelta(minutes=4))  # counts (02:00:30, 02:03:30]
        figures = metrics.snapshot()
        assert figures.due_times_skipped == {"disabled": 3, "held": 3}
        assert figures.due_times_unexplained == 1
        await watch.run_pass(T0 + timedelta(minutes=4, seconds=20))  # nothing new is due
        assert metrics.snapshot().due_times_unexplained == 1


async def test_only_the_owner_counts_a_due_time(nats_url: str) -> None:
    clock = ManualClock(T0)
    async with running(nats_url, unique_prefix(), clock=clock) as provider:
        await provider.apply(schedule("off", enabled=False))
        runtime = provider.runtime
        assert runtime is not None
        metrics = Metrics.disabled()
        watch = DueWatch(runtime.table, runtime.ledger, runtime.history, clock, metrics,
                         owns=lambda _dep, due: due.minute % 2 == 0)
        watch.start_at(T0)
        await watch.run_pass(T0 + timedelta(minutes=5))  # 02:01 .. 02:04: two are owned
        assert metrics.snapshot().due_times_skipped == {"disabled": 2}

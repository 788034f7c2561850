"""A 3-node cluster with 3 replicas of every stream and of the lease table (issue 4, item 5).

Killing the Runs' stream leader (SIGKILL) in the middle of a burst must lose no Run and
duplicate none: acknowledged writes survive on the other two nodes, the store's retries ride
out the election (docs/design.md: publishes stop for 4.5-8 s, so ``store_retry_seconds`` is
15 here), and a provider whose only known server died reconnects to the others by itself.
``SchedulerUnavailable`` is for when no quorum exists, and only then: with two nodes down
the provider says so within its retry budget, and works again, without a restart, once a
quorum is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from datetime import UTC, datetime

import pytest

from nats_scheduler.core import calendar
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.seam import (
    EnqueueRequest,
    Run,
    RunPayload,
    RunState,
    Schedule,
    SchedulerUnavailable,
    Trigger,
)
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.cluster import NatsCluster
from tests.harness.servers import stream_info, stream_leader, unique_prefix
from tests.providers import assert_clean, eventually, running

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

CLUSTERED: dict[str, object] = dict(
    replicas=3,
    store_retry_seconds=15.0,  # longer than a leader election (4.5-8 s here)
    lease_seconds=2.0,
    call_timeout=5.0,
    retry_attempts=8,
    retry_initial=0.05,
    retry_cap=0.5,
    connect_timeout=5.0,
)

FAR = datetime(2032, 2, 29, tzinfo=UTC)
"""Due times far in the future, of calendars that only have due times on 29 February: the
replicas' tickers never fire them for real while a test runs (fire_due takes any due time)."""


def schedule(version: int = 1) -> Schedule:
    return Schedule("burst", "burst", "*/5 * 29 2 *", "UTC", True, RunPayload("t", "p"), version)


async def replicas_current(cluster: NatsCluster, stream: str) -> bool:
    info = await stream_info(cluster.urls, stream)
    peers = (info.cluster.replicas or []) if info.cluster else []
    return len(peers) == 2 and all(p.current and not p.offline for p in peers)


async def all_dispatched(provider: NatsSchedulerProvider, count: int) -> list | None:  # type: ignore[type-arg]
    runs = await provider.list_runs("burst", limit=1000)
    done = len(runs) == count and all(r.state == RunState.DISPATCHED for r in runs)
    return runs if done else None


async def explain(provider: NatsSchedulerProvider, expected: set[str]) -> str:
    """Why a provider's history did not converge: its view against the store's."""
    runs = await provider.list_runs("burst", limit=1000)
    states = Counter(r.state.value for r in runs)
    lines = [f"{provider.identity}: {len(runs)}/{len(expected)} listed, {dict(states)}, "
             f"in flight {provider.dispatcher.in_flight if provider.dispatcher else None}"]
    listed = {r.run_id: r for r in runs}
    for run_id in sorted(expected):
        mine = listed.get(run_id)
        if mine is not None and mine.state == RunState.DISPATCHED:
            continue
        stored = await provider.runlog.fetch("burst", run_id)
        lines.append(f"  {run_id}: listed {mine.state.value if mine else None}, stored "
                     f"{stored[1].state.value if stored else None} holder "
                     f"{stored[1].holder if stored else None}")
    return "\n".join(lines[:40])


async def test_killing_the_runs_leader_during_a_burst_loses_and_duplicates_nothing(
    nats_cluster: NatsCluster,
) -> None:
    prefix = unique_prefix()
    handler = RecordingRunHandler()
    async with contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(
            running(nats_cluster.urls, prefix, handler, **CLUSTERED))
        await first.apply(schedule())
        victim = await stream_leader(nats_cluster, f"{prefix}_RUNS")
        # The second provider knows ONLY the node that is about to die: it must find the
        # others by itself (servers a cluster announces to its clients).
        second = await stack.enter_async_context(
            running(nats_cluster.nodes[victim].url, prefix, handler, **CLUSTERED))

        dues = calendar.due_times("*/5 * 29 2 *", "UTC", FAR, FAR.replace(hour=6))
        waves = [dues[i:i + 6] for i in range(0, len(dues), 6)]
        fired: dict[datetime, set[str]] = {}
        enqueued: set[str] = set()
        errors: list[BaseException] = []

        async def wave(n: int, dues_of_wave: list[datetime]) -> None:
            both = (first, second)
            fires = [p.fire_due("burst", due) for due in dues_of_wave for p in both]
            asks = [p.enqueue(EnqueueRequest("burst", Trigger.RUN_NOW, request_id=f"wave-{n}"))
                    for p in both]
            results = await asyncio.gather(*fires, *asks, return_exceptions=True)
            keys = [due for due in dues_of_wave for _ in both] + [None for _ in both]
            for key, result in zip(keys, results, strict=True):
                if isinstance(result, BaseException):
                    errors.append(result)
                elif key is None:
                    enqueued.add(result.run_id)
                else:
                    assert result is not None
                    fired.setdefault(key, set()).add(result.run_id)

        async def burst() -> None:
            for n, dues_of_wave in enumerate(waves):
                await wave(n, dues_of_wave)

        task = asyncio.create_task(burst())
        await eventually(lambda: len(fired) >= 12, timeout=30)
        killed_at = time.monotonic()
        await asyncio.to_thread(nats_cluster.kill, victim)
        await asyncio.wait_for(task, 120)
        burst_after_kill = time.monotonic() - killed_at
        await asyncio.to_thread(nats_cluster.restart, victim)

        assert errors == [], f"with a quorum nothing may fail: {errors[:3]}"
        assert sorted(fired) == dues
        assert all(len(ids) == 1 for ids in fired.values())
        assert len(enqueued) == len(waves)  # one Run per request_id, from both providers
        expected = {ids.copy().pop() for ids in fired.values()} | enqueued

        for provider in (first, second):
            try:
                runs = await eventually(lambda p=provider: all_dispatched(p, len(expected)),
                                        timeout=60, interval=0.1)
            except AssertionError:
                raise AssertionError(await explain(provider, expected)) from None
            assert {r.run_id for r in runs} == expected  # none lost, none extra
        for run_id in expected:
            assert handler.sessions_created(run_id) == 1
        # the node that came back caught up: every replica of the Runs is current again
        await eventually(lambda: replicas_current(nats_cluster, f"{prefix}_RUNS"), timeout=30,
                         interval=0.2)
        # the provider whose only configured server died came back by itself
        assert second.store.nc.is_connected and second.store.nc.stats["reconnects"] >= 1
        print(f"burst finished {burst_after_kill:.1f} s after the leader was killed")


async def test_without_quorum_the_provider_is_unavailable_and_recovers_by_itself(
    nats_cluster: NatsCluster,
) -> None:
    prefix = unique_prefix()
    handler = RecordingRunHandler()
    settings = {**CLUSTERED, "store_retry_seconds": 3.0}
    async with running(nats_cluster.urls, prefix, handler, **settings) as provider:
        await provider.apply(schedule(1))
        before = await provider.enqueue(EnqueueRequest("burst", Trigger.RUN_NOW))
        await eventually(lambda: handler.turn_of(before.run_id), timeout=20)
        # the start made the outage records' stream: let it settle before quorum goes
        runtime = provider.runtime
        assert runtime is not None and runtime.outages is not None
        await asyncio.wait_for(runtime.outages.decided.wait(), 40)

        await asyncio.to_thread(nats_cluster.kill, 1)
        await asyncio.to_thread(nats_cluster.kill, 2)
        began = time.monotonic()
        with pytest.raises(SchedulerUnavailable) as info:
            await provider.apply(schedule(2))
        assert time.monotonic() - began < 3.0 + 10
        assert_clean(str(info.value))
        with pytest.raises(SchedulerUnavailable) as info:
            await provider.enqueue(EnqueueRequest("burst", Trigger.RUN_NOW))
        assert_clean(str(info.value))

        await asyncio.to_thread(nats_cluster.restart, 1)
        await asyncio.to_thread(nats_cluster.restart, 2)

        # Each stream (and the lease table) elects its own leader once the quorum is back;
        # until then, with this test's short retry budget, calls may still say unavailable.
        async def works_again() -> Run | None:
            try:
                await provider.apply(schedule(3))
                return await provider.enqueue(
                    EnqueueRequest("burst", Trigger.RUN_NOW, request_id="after"))
            except SchedulerUnavailable:
                return None

        after = await eventually(works_again, timeout=60, interval=0.2)
        await eventually(lambda: handler.turn_of(after.run_id), timeout=30)
        run = await provider.get_run(after.run_id)
        assert run.state in (RunState.DISPATCHING, RunState.DISPATCHED)
        record = provider.schedules.get("burst")
        assert record is not None and record.version == 3

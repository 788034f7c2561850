"""Deployment and Run IDs of any content work, and can never escape or widen a subject."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nats_scheduler.seam import (
    EnqueueRequest,
    InvalidSchedule,
    RunNotFound,
    RunPayload,
    Schedule,
    ScheduleNotFound,
    Trigger,
)
from tests.harness.servers import unique_prefix
from tests.providers import assert_clean, running

pytestmark = pytest.mark.anyio

HOSTILE = ["a", "a.b", "a..b", "*", ">", "a b", "$JS.API.STREAM.LIST", "ünï©ødé 🙂",
           "a%2Eb", "x" * 255, "🙂" * 255, "ctl\x01\x7f"]


def schedule(dep: str) -> Schedule:
    return Schedule(dep, "n", "0 3 1 1 *", "UTC", True, RunPayload("t", dep[:20]), 1)


async def test_hostile_ids_keep_their_runs_apart(nats_url: str) -> None:
    async with running(nats_url, unique_prefix()) as provider:
        for dep in HOSTILE:
            await provider.apply(schedule(dep))
        due = datetime(2031, 1, 1, 3, 0, tzinfo=UTC)
        fired = {dep: await provider.fire_due(dep, due) for dep in HOSTILE}
        now_runs = {dep: await provider.enqueue(EnqueueRequest(dep, Trigger.RUN_NOW))
                    for dep in HOSTILE}
        for dep in HOSTILE:
            listed = await provider.list_runs(dep)
            assert {r.run_id for r in listed} == {fired[dep].run_id, now_runs[dep].run_id}
            assert all(r.deployment_id == dep for r in listed)
            assert (await provider.get_run(now_runs[dep].run_id)).deployment_id == dep
        # 'a' must not see 'a.b', '*' must not see everything, '>' neither
        assert len(await provider.list_runs("*")) == 2
        assert len(await provider.list_runs(">")) == 2
        assert len({r.run_id for r in fired.values()}) == len(HOSTILE)


async def test_hostile_lookups_are_clean_not_found(nats_url: str) -> None:
    async with running(nats_url, unique_prefix()) as provider:
        for bad in ["*", ">", "a.b.c", "$JS.API.>", "", "x" * 300, "bad\ud800"]:
            with pytest.raises(RunNotFound) as info:
                await provider.get_run(bad)
            assert_clean(str(info.value), echoed=bad)
            assert await provider.list_runs(bad) == []
            with pytest.raises(ScheduleNotFound):
                await provider.enqueue(EnqueueRequest(bad or "x", Trigger.RUN_NOW))
            await provider.delete(bad)  # unknown: a no-op


async def test_unusable_deployment_ids_are_invalid_schedules(nats_url: str) -> None:
    async with running(nats_url, unique_prefix()) as provider:
        for bad in ["x" * 256, "bad\ud800"]:
            with pytest.raises(InvalidSchedule) as info:
                await provider.apply(schedule(bad))
            assert_clean(str(info.value))
        assert provider.schedules.all() == []

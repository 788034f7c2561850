"""Firing many due times in pipelined batches (``Firing.fire_many``, the ticker's path).

The batch path must keep every promise of ``fire_due``: one Run per due time however often
it is fired, nothing for a Schedule paused (here: on another replica) before the batch's
creates, nothing for a time that is not a due time, and every Run started exactly once.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nats_scheduler import ManualClock
from nats_scheduler.names import scheduled_run_id
from nats_scheduler.runtime.firing import FIRE_BATCH
from nats_scheduler.seam import RunPayload, RunState, Schedule
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.servers import unique_prefix
from tests.providers import eventually, running

pytestmark = pytest.mark.anyio

DUE = datetime(2031, 5, 6, 3, 0, tzinfo=UTC)
COUNT = FIRE_BATCH + 44  # two batches, the second one partial


def schedule(deployment_id: str, *, enabled: bool = True, version: int = 1) -> Schedule:
    return Schedule(deployment_id, deployment_id, "0 3 * * *", "UTC", enabled,
                    RunPayload("t", deployment_id), version)


async def test_many_due_times_make_one_run_each_and_skip_what_is_not_due(
    nats_url: str,
) -> None:
    prefix = unique_prefix()
    handler = RecordingRunHandler()
    clock = ManualClock(datetime(2031, 5, 6, 2, 0, tzinfo=UTC))
    deployments = [f"batch-{i}" for i in range(COUNT)]
    async with running(nats_url, prefix, handler, clock=clock) as provider, \
            running(nats_url, prefix) as elsewhere:
        for deployment in deployments:
            await provider.apply(schedule(deployment))
        # paused on another replica before the batch: its Run must never be stored
        await elsewhere.apply(schedule("batch-7", enabled=False, version=2))
        not_due = DUE.replace(minute=1)
        due_times = [(deployment, DUE) for deployment in deployments]
        await provider.fire_many([*due_times, ("batch-8", not_due), ("unknown", DUE)])
        await provider.fire_many(due_times)  # again: still one Run per due time

        expected = {scheduled_run_id(d, DUE) for d in deployments if d != "batch-7"}
        def admitted() -> set[str]:
            return {c.run_id for c in handler.calls if c.method == "admit_turn"}

        await eventually(lambda: admitted() >= expected, timeout=60)
        for deployment in deployments:
            runs = await provider.list_runs(deployment)
            if deployment == "batch-7":
                assert runs == []
                continue
            assert [run.run_id for run in runs] == [scheduled_run_id(deployment, DUE)]
            assert runs[0].due_at == DUE
        assert await provider.list_runs("unknown") == []
        await provider.wait_idle(timeout=30)
        started = [c.run_id for c in handler.calls if c.method == "start_session"]
        assert sorted(started) == sorted(expected), "each Run started exactly once"
        states = {(await provider.get_run(run_id)).state for run_id in expected}
        assert states == {RunState.DISPATCHED}


async def test_a_batch_that_fails_as_a_whole_is_fired_one_by_one(
    nats_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An error outside the batch's items (here: its announcements, as when the connection
    closes under the pipelined publisher) loses no due time: the batch goes through
    ``fire_due`` instead."""
    prefix = unique_prefix()
    handler = RecordingRunHandler()
    clock = ManualClock(datetime(2031, 5, 6, 2, 0, tzinfo=UTC))
    deployments = [f"whole-{i}" for i in range(20)]
    async with running(nats_url, prefix, handler, clock=clock) as provider:
        for deployment in deployments:
            await provider.apply(schedule(deployment))
        original = provider.runlog.announce_many
        failed: list[int] = []

        async def broken(runs):  # type: ignore[no-untyped-def]
            failed.append(len(runs))
            monkeypatch.setattr(provider.runlog, "announce_many", original)
            raise ConnectionResetError("the connection closed mid-batch")

        monkeypatch.setattr(provider.runlog, "announce_many", broken)
        await provider.fire_many([(deployment, DUE) for deployment in deployments])
        assert failed == [len(deployments)], "the batch's announcements failed as a whole"
        for deployment in deployments:
            assert [r.run_id for r in await provider.list_runs(deployment)] == [
                scheduled_run_id(deployment, DUE)]

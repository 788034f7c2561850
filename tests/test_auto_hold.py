"""Auto-hold on repeated failure, against a real server (runtime/auto_hold.py).

``ASTRABOX_NATS_AUTO_HOLD_AFTER_FAILURES=N``: a Schedule is held by ``system`` once N of its
scheduled Runs in a row end FAILED, and not after N-1, nor when a success comes between; an
operator's release starts the count again; with two replicas counting the same failures one
hold is stored. Due times are fired through the provider's own firing path (``fire_due``,
as the ticker does), one after the other, each Run waited for until it ends.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from nats_scheduler.core import events as ev
from nats_scheduler.core.events import decode_schedule_event
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.seam import RunPayload, RunState, Schedule
from nats_scheduler.settings import NatsSettings
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.servers import unique_prefix
from tests.providers import eventually, running

pytestmark = pytest.mark.anyio

DEP = "flaky"
FIRST_DUE = datetime(2031, 1, 1, 3, 0, tzinfo=UTC)
AFTER = 3


def nightly() -> Schedule:
    return Schedule(DEP, "Flaky nightly", "0 3 * * *", "UTC", True,
                    RunPayload("agent/flaky", "report"), 1)


class Firing:
    """Fires the next due time of the Schedule and waits for its Run to end."""

    def __init__(self, provider: NatsSchedulerProvider, handler: RecordingRunHandler) -> None:
        self.provider = provider
        self.handler = handler
        self.due = FIRST_DUE
        self.run_ids: list[str] = []

    async def run(self, *, fails: bool, provider: NatsSchedulerProvider | None = None
                  ) -> RunState:
        self.handler.clear()
        if fails:
            self.handler.fail_permanently(deployment_id=DEP,
                                          message=f"quota exceeded {self.due:%d}")
        firing = provider or self.provider
        run = await firing.fire_due(DEP, self.due)
        assert run is not None, "the Schedule did not fire"
        self.run_ids.append(run.run_id)
        self.due += timedelta(days=1)

        async def ended() -> RunState | None:
            state = (await firing.get_run(run.run_id)).state
            return state if state in (RunState.DISPATCHED, RunState.FAILED) else None

        return await eventually(ended)


def counted(provider: NatsSchedulerProvider) -> int:
    """Failures in a row this replica counted for the Schedule (after its listener ran)."""
    running = provider.runtime
    assert running is not None and running.auto_hold is not None
    return running.auto_hold.failures(DEP)


async def stored_changes(provider: NatsSchedulerProvider) -> list[ev.ScheduleEventType]:
    """Every event of the Schedule, as stored, oldest first."""
    store = provider.store
    subject = store.names.schedule_subject(DEP)
    found, seq = [], 1
    while (msg := await store.next(subject, seq)) is not None:
        found.append(decode_schedule_event(msg.data))
        seq = msg.seq + 1
    return found


async def held_by_system(provider: NatsSchedulerProvider) -> ev.Hold | None:
    record = await provider.runtime.schedules.read(DEP)  # type: ignore[union-attr]
    hold = record.hold if record is not None else None
    return hold if hold is not None and hold.by == ev.SYSTEM else None


@contextlib.asynccontextmanager
async def replica(url: str, prefix: str, handler: RecordingRunHandler
                  ) -> AsyncIterator[NatsSchedulerProvider]:
    async with running(url, prefix, handler, auto_hold_after_failures=AFTER) as provider:
        yield provider


async def test_held_after_exactly_n_failures_in_a_row_not_across_a_success(nats_url: str
                                                                          ) -> None:
    handler = RecordingRunHandler()
    async with replica(nats_url, unique_prefix(), handler) as provider:
        await provider.apply(nightly())
        fire = Firing(provider, handler)
        assert await fire.run(fails=True) == RunState.FAILED
        assert await fire.run(fails=True) == RunState.FAILED
        await eventually(lambda: counted(provider) == AFTER - 1)
        assert provider.schedules.get(DEP).hold is None  # type: ignore[union-attr]
        assert await fire.run(fails=False) == RunState.DISPATCHED  # a success ends the row
        await eventually(lambda: counted(provider) == 0)
        assert await fire.run(fails=True) == RunState.FAILED
        assert await fire.run(fails=True) == RunState.FAILED
        await eventually(lambda: counted(provider) == AFTER - 1)
        assert await held_by_system(provider) is None  # N-1 since the success: not held
        assert await fire.run(fails=True) == RunState.FAILED  # the Nth in a row

        hold = await eventually(lambda: held_by_system(provider))
        assert hold.caller is None and hold.until is None
        assert "3 scheduled Runs in a row ended failed" in hold.reason
        assert "quota exceeded 06" in hold.reason  # the last error (the 6th due time's)
        assert ", ".join(fire.run_ids[-AFTER:]) in hold.reason
        assert await provider.fire_due(DEP, fire.due) is None  # held: it fires no more
        metrics = provider.runtime.metrics.snapshot()  # type: ignore[union-attr]
        assert metrics.auto_holds == 1

        # an operator's release starts the count again: N more failures to hold again
        await provider.release(DEP, by="alice", reason="quota raised")
        assert counted(provider) == 0
        fire.due += timedelta(days=1)
        for _ in range(AFTER - 1):
            assert await fire.run(fails=True) == RunState.FAILED
        await eventually(lambda: counted(provider) == AFTER - 1)
        assert await held_by_system(provider) is None
        assert await fire.run(fails=True) == RunState.FAILED
        await eventually(lambda: held_by_system(provider))
        helds = [e for e in await stored_changes(provider) if isinstance(e, ev.ScheduleHeld)]
        assert [e.by for e in helds] == [ev.SYSTEM, ev.SYSTEM]


async def test_two_replicas_counting_the_same_failures_store_one_hold(nats_url: str) -> None:
    prefix = unique_prefix()
    handler = RecordingRunHandler()
    async with replica(nats_url, prefix, handler) as first, \
            replica(nats_url, prefix, handler) as second:
        await first.apply(nightly())
        await eventually(lambda: second.schedules.get(DEP) is not None)
        fire = Firing(first, handler)
        for provider in (first, second, first):  # the Runs dispatched by either replica
            assert await fire.run(fails=True, provider=provider) == RunState.FAILED
        await eventually(lambda: held_by_system(first))
        await eventually(lambda: second.schedules.get(DEP).hold is not None)  # type: ignore[union-attr]
        for provider in (first, second):
            await eventually(lambda p=provider: not p.runtime.auto_hold.writing)  # type: ignore[union-attr]
        helds = [e for e in await stored_changes(first) if isinstance(e, ev.ScheduleHeld)]
        assert len(helds) == 1
        snapshots = [p.runtime.metrics.snapshot() for p in (first, second)]  # type: ignore[union-attr]
        assert sum(s.auto_holds for s in snapshots) == 1


async def test_off_by_default_and_out_of_range_is_refused(nats_url: str) -> None:
    handler = RecordingRunHandler()
    async with running(nats_url, unique_prefix(), handler) as provider:
        assert provider.runtime.auto_hold is None  # type: ignore[union-attr]
        await provider.apply(nightly())
        fire = Firing(provider, handler)
        for _ in range(AFTER + 1):
            assert await fire.run(fails=True) == RunState.FAILED
        assert provider.schedules.get(DEP).hold is None  # type: ignore[union-attr]
    env = {"ASTRABOX_NATS_URL": nats_url, "ASTRABOX_NATS_AUTO_HOLD_AFTER_FAILURES": "-1"}
    with pytest.raises(Exception, match="ASTRABOX_NATS_AUTO_HOLD_AFTER_FAILURES must be"):
        NatsSettings.from_env(env).validated()

"""Owners in a running provider: the live replicas split a minute's due times, and a stalled
owner's share is fired by the others once the owner patience has passed.

Two providers in this process share one server. Each has its own ManualClock: ``a``'s is
moved across a minute boundary, ``b``'s never moves, so ``b`` is alive (it beats in the
replicas bucket) but fires nothing, like a replica whose ticker stalled. ``a`` must fire the
due times it owns at once, leave ``b``'s to ``b`` while ``b`` is live (looking again every
grace), and fire them itself once the patience has passed since the due time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nats_scheduler import ManualClock
from nats_scheduler.core.ownership import owner, owner_key
from nats_scheduler.names import scheduled_run_id
from nats_scheduler.runtime.ticker import OWNER_GRACE_SECONDS, OWNER_PATIENCE_SECONDS
from nats_scheduler.seam import RunPayload, RunState, Schedule
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.servers import unique_prefix
from tests.providers import eventually, running

pytestmark = pytest.mark.anyio

T0 = datetime(2031, 7, 1, 9, 59, 50, tzinfo=UTC)
DUE = datetime(2031, 7, 1, 10, 0, tzinfo=UTC)


async def test_a_stalled_owners_due_times_are_fired_by_the_others_after_the_patience(
    nats_url: str,
) -> None:
    prefix = unique_prefix()
    handler = RecordingRunHandler()
    clock_a, clock_b = ManualClock(T0), ManualClock(T0)
    deployments = [f"owned-{i}" for i in range(24)]
    async with running(nats_url, prefix, handler, clock=clock_a) as a, \
            running(nats_url, prefix, RecordingRunHandler(), clock=clock_b) as b:
        await a.until_ready()  # a replica joins the live ones once its Schedules are loaded
        await b.until_ready()
        assert a.runtime is not None and b.runtime is not None
        assert a.runtime.presence is not None and b.runtime.presence is not None
        presence_a = a.runtime.presence
        await eventually(lambda: len(presence_a.live()) == 2, timeout=10)
        for deployment in deployments:
            await a.apply(Schedule(deployment, deployment, "0 10 * * *", "UTC", True,
                                   RunPayload("t", deployment), 1))
        await eventually(lambda: b.ticker is not None and b.ticker.planned == 24, timeout=10)
        members = presence_a.live()
        mine = {d for d in deployments if owner(members, owner_key(d, DUE)) == a.identity}
        assert 0 < len(mine) < len(deployments), "both replicas own part of the minute"

        def stored() -> set[str]:
            return {d for d in deployments
                    if a.ledger.get(scheduled_run_id(d, DUE)) is not None}

        clock_a.set(DUE + timedelta(seconds=1))
        await eventually(lambda: stored() >= mine, timeout=20)
        assert stored() == mine, "the due times b owns are left to b during the grace"

        ticker_a = a.ticker
        assert ticker_a is not None
        theirs = len(deployments) - len(mine)
        clock_a.set(DUE + timedelta(seconds=1 + OWNER_GRACE_SECONDS))  # a looks again
        await eventually(lambda: ticker_a.kept_for_owner >= theirs, timeout=20)
        assert stored() == mine, "b is live: its due times stay b's after the grace"

        clock_a.set(DUE + timedelta(seconds=1 + OWNER_PATIENCE_SECONDS))
        await eventually(lambda: stored() == set(deployments), timeout=20)
        for deployment in deployments:
            runs = await a.list_runs(deployment)
            assert [r.run_id for r in runs] == [scheduled_run_id(deployment, DUE)]
        await a.wait_idle(timeout=30)
        states = {(await a.get_run(scheduled_run_id(d, DUE))).state for d in deployments}
        assert states == {RunState.DISPATCHED}

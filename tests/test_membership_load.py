"""A replica never decides it is alone because it is busy (docs/architecture.md, "Firing at
scale: owners, batches, and what bounds them").

First, a join the store does not answer in time (a replica whose own event loop is busy
loading a million Schedules saw exactly that): two providers in this process on their own
ManualClocks, the second one's attempts to join failing with a time-out until the test lets
them through. Until it has joined it cannot tell who is live, so it fires none of the
minute's due times at once (before, it fired every one itself, for ever); the owner
patience still hands it those nobody fired; once its join succeeds it fires its own share.

Then a busy event loop in steady state: two replica processes share a minute's due times,
and one of them has its event loop blocked (``stall``: a GC pause, a reconcile of a million
Schedules, a CPU-starved host) from just before the minute boundary until well past the
liveness window. Meanwhile the other sees its puts stop and takes its due times over, as it
should. When the busy one wakes up, it has read nothing newer from the store than before it
stalled, so the other is still live to it: it fires its own share (already stored: the
store keeps one Run) and leaves the other's share to its owner, never firing it. That test
waits for a real minute boundary (at most one minute).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import nats.errors
import pytest

from nats_scheduler import ManualClock
from nats_scheduler.core.ownership import owner, owner_key
from nats_scheduler.jetstream.presence import Presence
from nats_scheduler.names import scheduled_run_id
from nats_scheduler.runtime.ticker import OWNER_GRACE_SECONDS, OWNER_PATIENCE_SECONDS
from nats_scheduler.seam import RunPayload, Schedule
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.replicas import ReplicaSet
from tests.harness.servers import unique_prefix
from tests.harness.shared_handler import SqliteRunHandler
from tests.providers import eventually, running

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

DEPLOYMENTS = [f"busy-{i}" for i in range(40)]
STALL_BEFORE = 2.0
"""Seconds before the boundary the busy replica's event loop stops."""
STALL = 8.0
"""Seconds it stays stopped: past the liveness window (3 s) and a grace (3 s), well inside
the owner patience (30 s)."""
LEAD = STALL_BEFORE + 3.0
"""A boundary sooner than this after the replicas are ready is skipped for the next one."""


T0 = datetime(2031, 7, 1, 9, 59, 50, tzinfo=UTC)
DUE = datetime(2031, 7, 1, 10, 0, tzinfo=UTC)


async def test_a_join_the_store_does_not_answer_in_time_is_tried_again_not_taken_for_alone(
    nats_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    unanswered = {"replica-b"}
    started = Presence.start

    async def start(presence: Presence) -> None:
        if presence.identity in unanswered:
            raise nats.errors.TimeoutError  # the store's answer did not come in time
        await started(presence)

    monkeypatch.setattr(Presence, "start", start)
    prefix, clock_a, clock_b = unique_prefix(), ManualClock(T0), ManualClock(T0)
    deployments = [f"joining-{i}" for i in range(24)]
    async with running(nats_url, prefix, clock=clock_a, identity="replica-a") as a, \
            running(nats_url, prefix, RecordingRunHandler(), clock=clock_b,
                    identity="replica-b") as b:
        await a.until_ready()
        await b.until_ready()
        assert b.runtime is not None and b.ticker is not None
        membership, ticker = b.runtime.membership, b.ticker
        for deployment in deployments:
            await a.apply(Schedule(deployment, deployment, "0 10 * * *", "UTC", True,
                                   RunPayload("t", deployment), 1))
        await eventually(lambda: ticker.planned == len(deployments), timeout=10)
        await eventually(lambda: membership.attempts >= 2, timeout=10)  # tried again
        assert membership.presence is None

        def stored(due: datetime) -> set[str]:
            return {d for d in deployments if b.ledger.get(scheduled_run_id(d, due))}

        clock_b.set(DUE + timedelta(seconds=1 + OWNER_GRACE_SECONDS))  # a's clock stays
        await eventually(lambda: ticker.kept_for_owner >= len(deployments), timeout=20)
        assert ticker.fired == 0 and stored(DUE) == set(), "it cannot tell: none at once"
        clock_b.set(DUE + timedelta(seconds=1 + OWNER_PATIENCE_SECONDS))
        await eventually(lambda: stored(DUE) == set(deployments), timeout=20)  # the patience

        unanswered.clear()  # the store answers again: the next attempt joins
        await eventually(lambda: membership.presence is not None
                         and len(membership.presence.live()) == 2, timeout=20)
        members = ("replica-a", "replica-b")
        due = DUE + timedelta(days=1)
        mine = {d for d in deployments if owner(members, owner_key(d, due)) == "replica-b"}
        assert 0 < len(mine) < len(deployments)
        clock_b.set(due + timedelta(seconds=1))
        await eventually(lambda: stored(due) >= mine, timeout=20)
        assert stored(due) == mine, "joined: its own share at once, a's left to a"
        await b.wait_idle(timeout=30)


def next_boundary(after: float) -> datetime:
    return datetime.fromtimestamp((int(after) // 60 + 1) * 60, UTC)


@pytest.mark.wall_clock(boundary=True)
async def test_a_replica_whose_event_loop_is_saturated_never_fires_the_others_due_times(
    replicas: ReplicaSet, handler: SqliteRunHandler,
) -> None:
    a, b = await replicas.spawn("a", "b")
    for deployment in DEPLOYMENTS:
        await a.send("apply", schedule={"deployment_id": deployment, "cron": "* * * * *",
                                        "timezone": "UTC", "version": 1, "enabled": True})

    async def ready() -> bool:
        statuses = [await r.send("status") for r in (a, b)]
        return all(s["planned"] == len(DEPLOYMENTS) and s["live_replicas"] == 2
                   for s in statuses)

    await eventually(ready, timeout=30, interval=0.1)
    due = next_boundary(time.time() + LEAD)
    await asyncio.sleep(max(0.0, due.timestamp() - STALL_BEFORE - time.time()))  # a timing
    await b.stall(STALL)  # the loop stops before the boundary and runs again after it

    members = tuple(sorted((a.identity, b.identity)))
    theirs = {d for d in DEPLOYMENTS if owner(members, owner_key(d, due)) == a.identity}
    assert 0 < len(theirs) < len(DEPLOYMENTS), "both replicas own part of the minute"
    run_ids = {scheduled_run_id(d, due) for d in DEPLOYMENTS}
    await eventually(lambda: run_ids <= set(handler.turns()), timeout=60)

    async def settled() -> dict[str, object] | None:
        """b has looked at each of a's due times and found a's Run: left to its owner."""
        status = await b.send("status")
        return status if status["left_to_owner"] >= len(theirs) else None

    status = await eventually(settled, timeout=60, interval=0.25)
    fired_by_b = {dep for dep, at in status["ticker_fires"]
                  if datetime.fromisoformat(at) == due}
    assert not fired_by_b & theirs, "the busy replica fired due times its peer owned"
    for deployment in DEPLOYMENTS:
        runs = (await a.send("list_runs", deployment=deployment))["runs"]
        assert [r["run_id"] for r in runs
                if datetime.fromisoformat(r["due_at"]) == due] == [
            scheduled_run_id(deployment, due)]
    assert all(len(handler.calls(rid)) >= 1 for rid in run_ids)

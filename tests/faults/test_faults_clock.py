"""A replica's clock stepping forward and back by minutes (an NTP step, a host clock fixed).

Each replica runs on an :class:`~tests.harness.clocks.OffsetClock` the test steps. What
must hold whatever the clocks say: no due time becomes two Runs, no Run is made for a time
that is not a due time, and no lease is taken from a holder that is alive and renewing it.
A replica whose clock runs ahead fires the due times it believes have come, early (the
store cannot know the true time); that is documented (docs/failure-modes.md), not doubled.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

import pytest

from nats_scheduler.core import calendar
from tests.harness.replicas import ReplicaProcess, ReplicaSet, replica_set
from tests.harness.scenario import FAST_REPLICA, LEASE, assert_clean_store, schedule
from tests.harness.shared_handler import SqliteRunHandler
from tests.providers import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

STEP = 150.0
"""Seconds a clock is stepped: more than two minute boundaries, far more than a lease."""


@pytest.fixture
def handler(tmp_path: Path) -> SqliteRunHandler:
    return SqliteRunHandler(tmp_path / "handler.db", process="test")


@pytest.fixture
async def replicas(nats_url: str, tmp_path: Path,
                   handler: SqliteRunHandler) -> AsyncIterator[ReplicaSet]:
    async with replica_set(nats_url, tmp_path, handler.path, lease_seconds=LEASE,
                           settings=FAST_REPLICA) as rs:
        yield rs


async def ticker_fires(replica: ReplicaProcess, deployment: str) -> set[datetime]:
    status = await replica.send("status")
    return {datetime.fromisoformat(due) for dep, due in status["ticker_fires"]
            if dep == deployment}


async def test_clocks_stepped_by_minutes_neither_double_nor_invent_due_times(
    replicas: ReplicaSet, handler: SqliteRunHandler,
) -> None:
    a, b, _c = await replicas.spawn("a", "b", "c")
    await a.send("apply", schedule=schedule("tick", "* * * * *"))
    # b's clock jumps ahead: its ticker fires the due times it believes have come ...
    await b.step_clock(STEP)
    await eventually(lambda: _at_least(b, "tick", 2), timeout=10)
    await b.step_clock(-STEP)
    # ... and a's does the same a moment later: the same due times. Those it does not own
    # and already have a Run it leaves to their owner; any it fires still make one Run each.
    await a.step_clock(STEP)
    await eventually(lambda: _handled_at_least(a, "tick", 2), timeout=10)
    await a.step_clock(-STEP)
    fired_a, fired_b = await ticker_fires(a, "tick"), await ticker_fires(b, "tick")
    assert len(fired_b) >= 2, fired_b
    await a.send("delete", deployment="tick")

    runs = (await a.send("list_runs", deployment="tick"))["runs"]
    by_due: dict[datetime, list[str]] = {}
    for run in runs:
        by_due.setdefault(datetime.fromisoformat(run["due_at"]), []).append(run["run_id"])
    assert all(len(ids) == 1 for ids in by_due.values()), by_due  # none doubled
    assert fired_a | fired_b <= set(by_due)
    assert all(calendar.is_due_time("* * * * *", "UTC", due) for due in by_due)  # none invented
    await _finished(a, "tick", len(runs))
    # A clock ahead fires early: a due time within STEP of the replicas' lives is theirs.
    await assert_clean_store(replicas.url, replicas.prefix, handler=handler,
                             windows=replicas.windows(), margin=STEP + 5)


async def test_no_lease_is_taken_from_a_live_holder_whatever_the_clocks_say(
    replicas: ReplicaSet, handler: SqliteRunHandler,
) -> None:
    """b holds Runs in a long admit_turn (renewing their leases) while c's clock is minutes
    ahead (every lease looks expired to it) and b's own clock steps back minutes (its
    renewals must not wait for the minutes it lost)."""
    a, b, c = await replicas.spawn("a", "b", "c")
    await a.send("apply", schedule=schedule("slow"))
    handler.set_rule("slow", "hang_admit")
    run_ids = [(await b.send("enqueue", deployment="slow", request_id=f"r{i}"))["run"]["run_id"]
               for i in range(3)]
    await eventually(lambda: _hanging(handler, run_ids) == {"b"}, timeout=10)
    await c.step_clock(STEP)
    await b.step_clock(-STEP)
    # Exposure, not a wait for a condition: several lease lengths in which c's sweeps (every
    # lease/5) see b's leases, and b must renew them on time.
    await asyncio.sleep(4 * LEASE)
    handler.set_rule("slow", None)
    await eventually(lambda: set(handler.turns()) >= set(run_ids), timeout=30)
    await _finished(a, "slow", 3)
    report = await assert_clean_store(replicas.url, replicas.prefix, handler=handler,
                                      windows=replicas.windows())
    assert report.runs == 3
    assert {c.process for c in handler.calls() if c.run_id in run_ids} == {"b"}


def _hanging(handler: SqliteRunHandler, run_ids: list[str]) -> set[str]:
    hangs = [c for c in handler.calls() if c.outcome == "hang" and c.run_id in run_ids]
    return {c.process for c in hangs} if len({c.run_id for c in hangs}) == 3 else set()


async def _handled_at_least(replica: ReplicaProcess, deployment: str, count: int) -> bool:
    """Due times of ``deployment`` fired, or left to their owner because a Run existed."""
    left = (await replica.send("status"))["left_to_owner"]
    return len(await ticker_fires(replica, deployment)) + left >= count


async def _at_least(replica: ReplicaProcess, deployment: str, count: int) -> bool:
    return len(await ticker_fires(replica, deployment)) >= count


async def _finished(replica: ReplicaProcess, deployment: str, count: int) -> None:
    async def done() -> bool:
        runs = (await replica.send("list_runs", deployment=deployment))["runs"]
        return len(runs) == count and all(r["state"] in ("dispatched", "failed") for r in runs)

    await eventually(done, timeout=30)

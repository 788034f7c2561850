"""A replica's clock wrong by seconds or minutes, or stepped (an NTP daemon that died, a host
clock fixed by hand).

Each replica runs on an :class:`~tests.harness.clocks.OffsetClock` the test sets or steps.
The replicas fire by the store's clock (docs/architecture.md, "One clock: the store's"), so
whatever a host's clock says: no ``start_session`` before its due time by the server's clock
(the server runs on this host, so the handler's record is on the server's clock), every due
time fired exactly once and within the owner grace, no Run for a time that is not a due time,
and no lease taken from a holder that is alive and renewing it.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nats_scheduler.admin.invariants import EARLY_TOLERANCE
from nats_scheduler.core import calendar
from nats_scheduler.core.events import RunCreated
from nats_scheduler.names import scheduled_run_id
from nats_scheduler.runtime.ticker import OWNER_GRACE_SECONDS
from tests.harness.checking import check_store, read_history
from tests.harness.replicas import ReplicaProcess, ReplicaSet, replica_set
from tests.harness.scenario import FAST_REPLICA, LEASE, assert_clean_store, schedule
from tests.harness.shared_handler import SqliteRunHandler
from tests.providers import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

STEP = 150.0
"""Seconds a clock is stepped: more than two minute boundaries, far more than a lease."""

SCHEDULES = 20
"""``* * * * *`` Schedules of the offset scenarios: each replica owns some of them."""

ESTIMATE_ERROR = 0.1
"""Seconds the replica's estimate of its own clock's offset may be off (a loopback round
trip is a millisecond; this is for a loaded machine)."""


async def ticker_fires(replica: ReplicaProcess, deployment: str) -> set[datetime]:
    status = await replica.send("status")
    return {datetime.fromisoformat(due) for dep, due in status["ticker_fires"]
            if dep == deployment}


async def server_offset(replica: ReplicaProcess) -> float | None:
    return (await replica.send("status"))["server_offset"]


async def offset_near(replica: ReplicaProcess, offset: float) -> bool:
    estimate = await server_offset(replica)
    return estimate is not None and abs(estimate - offset) < ESTIMATE_ERROR


@dataclass
class Scenario:
    """One clock fault on a replica set of its own (its own prefix and handler), so that
    every scenario of the test is judged at the same minute boundary: the wait for a real
    boundary is the cost of these tests, paid once instead of once per scenario."""

    name: str
    replicas: ReplicaSet
    handler: SqliteRunHandler

    async def prepare(self) -> None:
        """Spawn, skew or step, apply: ready for the next boundary."""
        raise NotImplementedError

    async def judge(self, due: datetime) -> None:
        """Once ``due`` has passed: what the fault must not have changed."""
        raise NotImplementedError


class WrongClock(Scenario):
    """One of two replicas on a host clock ``offset`` seconds wrong, 20 Schedules due every
    minute: each of the boundary's Runs is stored once, at or after its due time by the
    server's clock and within the owner grace; no ``start_session`` comes before it."""

    offset: float = 0.0

    async def prepare(self) -> None:
        honest, = await self.replicas.spawn("honest")
        skewed, = await self.replicas.spawn("skewed", clock_offset=self.offset)
        await eventually(lambda: offset_near(skewed, self.offset), timeout=10)
        await eventually(lambda: offset_near(honest, 0.0), timeout=10)
        self.honest = honest
        self.deployments = [f"tick{i:02}" for i in range(SCHEDULES)]
        for deployment in self.deployments:
            await honest.send("apply", schedule=schedule(deployment, "* * * * *"))

    async def judge(self, due: datetime) -> None:
        honest, deployments, replicas = self.honest, self.deployments, self.replicas
        expected = {(d, due) for d in deployments}

        async def all_finished() -> bool:
            for deployment in deployments:
                runs = (await honest.send("list_runs", deployment=deployment))["runs"]
                if not any(datetime.fromisoformat(r["due_at"]) == due
                           and r["state"] in ("dispatched", "failed") for r in runs):
                    return False
            return True

        await eventually(all_finished, timeout=90)
        for deployment in deployments:
            await honest.send("delete", deployment=deployment)
        history = await read_history(replicas.url, replicas.prefix)
        created = {(e.event.run.deployment_id, e.event.run.due_at): e for e in history.runs
                   if isinstance(e.event, RunCreated) and e.event.run.due_at is not None}
        assert expected <= set(created), self.name
        for key in expected:
            late = (created[key].stored_at - due).total_seconds()
            assert -EARLY_TOLERANCE <= late <= OWNER_GRACE_SECONDS, (self.name, key, late)
        # both took their share: the skewed replica fired its own due times (not early, not
        # 20 s late), it did not leave them all to the other or take them all itself
        creators = {e.event.actor for key, e in created.items() if key in expected}
        assert creators == {"honest", "skewed"}, (self.name, creators)
        tolerance = timedelta(seconds=EARLY_TOLERANCE)
        sessions = [c for c in self.handler.calls() if c.method == "start_session"]
        assert len({c.run_id for c in sessions}) >= SCHEDULES, self.name
        # each call against its own Run's due time: a slow start can let the replicas live
        # through a boundary before the judged one, and those Runs are due a minute earlier
        due_of = {e.event.run.run_id: e.event.run.due_at for e in created.values()}
        assert {scheduled_run_id(d, due) for d in deployments} <= set(due_of), self.name
        early = [c for c in sessions if c.run_id in due_of
                 and datetime.fromtimestamp(c.at, UTC) < due_of[c.run_id] - tolerance]
        assert not early, (self.name, early)
        # the checker, with its ``early`` invariant: exactly one Run per due time the replicas
        # lived through, none invented, none created or started before its due time
        report = await check_store(replicas.url, replicas.prefix, handler=self.handler,
                                   windows=replicas.windows(), expected=expected,
                                   lease_seconds=LEASE, ticker_only=True)
        assert report.ok, (self.name, report.text())


class SteppedClocks(Scenario):
    """Three replicas; b's clock jumps ahead past two boundaries and a's back: b fires
    nothing before the server's clock reaches it, a nothing late, both keep their estimate,
    and the boundary makes one Run, on time, none doubled or invented."""

    async def prepare(self) -> None:
        a, b, _c = await self.replicas.spawn("a", "b", "c")
        self.a, self.b = a, b
        await a.send("apply", schedule=schedule("tick", "* * * * *"))
        await b.step_clock(STEP)
        await a.step_clock(-STEP)
        await eventually(lambda: offset_near(b, STEP), timeout=10)
        await eventually(lambda: offset_near(a, -STEP), timeout=10)
        now = datetime.now(UTC)
        assert all(due <= now for due in await ticker_fires(b, "tick"))

    async def judge(self, due: datetime) -> None:
        a, b = self.a, self.b

        async def fired() -> bool:
            runs = (await a.send("list_runs", deployment="tick"))["runs"]
            return any(datetime.fromisoformat(r["due_at"]) == due for r in runs)

        await eventually(fired, timeout=75)
        await b.step_clock(-STEP)
        await a.step_clock(STEP)
        await a.send("delete", deployment="tick")

        runs = (await a.send("list_runs", deployment="tick"))["runs"]
        by_due: dict[datetime, list[str]] = {}
        for run in runs:
            by_due.setdefault(datetime.fromisoformat(run["due_at"]), []).append(run["run_id"])
        assert all(len(ids) == 1 for ids in by_due.values()), by_due  # none doubled
        assert all(calendar.is_due_time("* * * * *", "UTC", due) for due in by_due)  # none invented
        fired_all = (await ticker_fires(a, "tick")) | (await ticker_fires(b, "tick"))
        assert fired_all <= set(by_due)
        assert all(d <= datetime.now(UTC) for d in fired_all)
        await _finished(a, "tick", len(runs))
        # and the checker, ``early`` included: nothing stored or started before it was due
        await assert_clean_store(self.replicas.url, self.replicas.prefix, handler=self.handler,
                                 windows=self.replicas.windows())


def _wrong_clock(offset: float) -> type[WrongClock]:
    return type(f"WrongClock{offset:+.0f}", (WrongClock,), {"offset": offset})


SCENARIOS: dict[str, type[Scenario]] = {
    "20s-ahead": _wrong_clock(20.0),
    "20s-behind": _wrong_clock(-20.0),
    "10min-ahead": _wrong_clock(600.0),
    "stepped-by-minutes": SteppedClocks,
}


@pytest.mark.wall_clock(boundary=True)
async def test_replicas_whose_clocks_are_wrong_or_stepped_fire_by_the_servers_clock(
    nats_url: str, tmp_path: Path,
) -> None:
    """Every scenario of :data:`SCENARIOS` side by side on one server, judged at the first
    minute boundary that comes after all of them are ready (a boundary within two seconds
    of the last apply might be planned by one replica and not another: it is skipped)."""
    async with AsyncExitStack() as stack:
        scenarios: list[Scenario] = []
        for name, kind in SCENARIOS.items():
            handler = SqliteRunHandler(tmp_path / f"{name}.db", process="test")
            replicas = await stack.enter_async_context(replica_set(
                nats_url, tmp_path / name, handler.path, lease_seconds=LEASE,
                settings=FAST_REPLICA))
            scenarios.append(kind(name, replicas, handler))
        await asyncio.gather(*(scenario.prepare() for scenario in scenarios))
        due = calendar.next_due("* * * * *", "UTC", datetime.now(UTC) + timedelta(seconds=2))
        assert due is not None
        await asyncio.gather(*(scenario.judge(due) for scenario in scenarios))


@pytest.mark.wall_clock
async def test_no_lease_is_taken_from_a_live_holder_whatever_the_clocks_say(
    replicas: ReplicaSet, handler: SqliteRunHandler,
) -> None:
    """b holds Runs in a long admit_turn (renewing their leases) while c's clock is minutes
    ahead (every lease would look expired to it by its own clock) and b's own clock steps
    back minutes (its renewals must not wait for the minutes it lost)."""
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


async def _finished(replica: ReplicaProcess, deployment: str, count: int) -> None:
    async def done() -> bool:
        runs = (await replica.send("list_runs", deployment=deployment))["runs"]
        return len(runs) == count and all(r["state"] in ("dispatched", "failed") for r in runs)

    await eventually(done, timeout=30)

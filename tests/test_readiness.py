"""Start-up behind the readiness gate, on a real server.

``start()`` returns before the Schedule table is loaded; the table loads in the background.
Until it has, Schedule changes, firing and the admin service's answers wait, the replica
says it is not ready (``replica.status``), and its ticker plans nothing. Once loaded, every
Schedule is planned from the instant the process started, so a due time that passed during
the load is fired, exactly once. Schedule changes wait for the table only: once it is
loaded they are decided while the replica joins and plans.

The load is held open by the test (the Schedule follower's catch-up waits for an event the
test sets) so that the due time falls inside the window deterministically; the server,
the follower and the firing are real.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from nats_scheduler import ManualClock, NatsSchedulerProvider
from nats_scheduler.admin.client import AdminClient
from nats_scheduler.core.events import ScheduleRecord
from nats_scheduler.jetstream.follower import Follower
from nats_scheduler.names import scheduled_run_id
from nats_scheduler.runtime import wiring
from nats_scheduler.runtime.membership import Membership
from nats_scheduler.runtime.ticker import Dues, Ticker
from nats_scheduler.seam import RunPayload, Schedule
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import eventually, running

pytestmark = pytest.mark.anyio

T0 = datetime(2031, 7, 1, 9, 59, 50, tzinfo=UTC)
DUE = datetime(2031, 7, 1, 10, 0, tzinfo=UTC)


def daily(dep: str, prompt: str = "p") -> Schedule:
    return Schedule(dep, dep, "0 10 * * *", "UTC", True, RunPayload("agent", prompt), 1)


@pytest.fixture
def held_load(monkeypatch: pytest.MonkeyPatch) -> Iterator[asyncio.Event]:
    """Hold every Schedule follower's catch-up until the returned event is set."""
    release = asyncio.Event()
    original = Follower.caught_up

    async def caught_up(self: Follower, timeout: float = 30.0) -> None:
        if self.from_seq is None:  # the Schedule follower (the Run one starts at the end)
            await release.wait()
        await original(self, timeout)

    monkeypatch.setattr(Follower, "caught_up", caught_up)
    yield release
    release.set()


async def test_a_due_time_during_the_load_fires_exactly_once(
    nats_url: str, held_load: asyncio.Event,
) -> None:
    prefix = unique_prefix()
    held_load.set()  # the loader starts as usual
    async with running(nats_url, prefix, clock=ManualClock(T0)) as loader:
        for i in range(50):
            await loader.apply(daily(f"dep-{i}"))
    held_load.clear()
    clock = ManualClock(T0)
    handler = RecordingRunHandler()
    async with running(nats_url, prefix, handler, clock=clock) as replica:
        assert not replica.ready
        assert replica.ticker is not None and replica.ticker.planned == 0
        clock.set(DUE + timedelta(seconds=5))  # the due time passes while it loads
        changing = asyncio.create_task(replica.apply(daily("dep-0", prompt="changed")))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not changing.done(), "a Schedule change waits for the table"
        held_load.set()
        await replica.until_ready()
        await changing
        assert replica.ticker.planned == 50

        def stored() -> int:
            return sum(replica.ledger.get(scheduled_run_id(f"dep-{i}", DUE)) is not None
                       for i in range(50))

        await eventually(lambda: stored() == 50, timeout=20)
        clock.advance(30)  # later wake-ups must not fire it again
        await replica.wait_idle(timeout=30)
        for i in range(50):
            runs = await replica.list_runs(f"dep-{i}")
            assert [r.due_at for r in runs] == [DUE], f"dep-{i}"
        assert sum(len(handler.run_ids(f"dep-{i}")) for i in range(50)) == 50


@pytest.mark.wall_clock
async def test_the_admin_service_waits_and_the_replica_says_it_is_loading(
    nats_url: str, held_load: asyncio.Event,
) -> None:
    prefix = unique_prefix()
    held_load.set()
    async with running(nats_url, prefix, clock=ManualClock(T0)) as loader:
        await loader.apply(daily("dep-a"))
        held_load.clear()
        async with running(nats_url, prefix, clock=ManualClock(T0)) as replica:
            nc = await connect_fast(nats_url)
            try:
                client = AdminClient(nc, prefix, timeout=5.0)
                status = await client.cluster_status()  # answered by the loader (ready)
                ready = {r.identity: r.ready for r in status.replicas}
                assert ready == {loader.identity: True, replica.identity: False}
                held_load.set()
                await replica.until_ready()
                status = await client.cluster_status()
                assert all(r.ready for r in status.replicas)
            finally:
                await nc.close()


async def test_schedule_changes_are_decided_once_the_table_is_loaded_before_the_rest(
    nats_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """AstraBox's reconcile at a restart waits for the Schedule table only: joining the
    replicas and planning every Schedule (held open here) go on behind it, the replica is
    not ready until they end, and what the reconcile changed is planned then, once."""
    prefix = unique_prefix()
    async with running(nats_url, prefix, clock=ManualClock(T0)) as loader:
        await loader.reconcile([daily(f"dep-{i}") for i in range(20)])
    joining = asyncio.Event()
    original = Membership.join

    async def join(self: Membership) -> None:
        await joining.wait()
        await original(self)

    monkeypatch.setattr(Membership, "join", join)
    clock, handler = ManualClock(T0), RecordingRunHandler()
    async with running(nats_url, prefix, handler, clock=clock) as replica:
        wanted = [daily(f"dep-{i}") for i in range(1, 20)]  # dep-0 deleted
        wanted[0] = Schedule("dep-1", "dep-1", "0 11 * * *", "UTC", True,
                             RunPayload("agent", "p"), 2)  # its calendar changed
        wanted.append(daily("dep-new"))
        await asyncio.wait_for(replica.reconcile(wanted), 30)
        assert not replica.ready and replica.ticker is not None
        assert replica.ticker.planned == 0, "nothing is planned before the replica joined"
        stored = {r.deployment_id: r for r in replica.schedules.live()}
        assert set(stored) == {s.deployment_id for s in wanted}
        assert stored["dep-1"].cron == "0 11 * * *"
        joining.set()
        await asyncio.wait_for(replica.until_ready(), 30)
        assert replica.ticker.planned == 20  # dep-0 gone, dep-new in
        clock.set(DUE + timedelta(seconds=5))
        await eventually(lambda: sum(replica.ledger.get(scheduled_run_id(s.deployment_id, DUE))
                                     is not None for s in wanted) == 19, timeout=20)
        new_run = scheduled_run_id("dep-new", DUE)
        await eventually(lambda: handler.run_ids("dep-new") == {new_run}, timeout=20)
        await replica.wait_idle(timeout=30)
        assert replica.ledger.get(scheduled_run_id("dep-1", DUE)) is None  # 11:00 now
        assert replica.ledger.get(scheduled_run_id("dep-0", DUE)) is None  # deleted
        assert handler.run_ids("dep-new") == {new_run}


async def test_a_schedule_changed_while_the_loaded_ones_are_planned_keeps_its_change(
    nats_url: str, held_load: asyncio.Event, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The loaded Schedules are planned a chunk at a time; one that changes between two
    chunks is planned by its change, and the chunk that holds it later plans the table's
    record, not the older copy in the list planning began with."""
    prefix = unique_prefix()
    held_load.set()
    async with running(nats_url, prefix, clock=ManualClock(T0)) as loader:
        await loader.reconcile([daily(f"dep-{i}") for i in range(6)])
    held_load.clear()
    monkeypatch.setattr(wiring, "PLAN_CHUNK", 2)
    replicas: list[NatsSchedulerProvider] = []
    original = Ticker.plan_loaded

    def plan_loaded(self: Ticker, records: Iterable[ScheduleRecord], began: datetime,
                    dues: Dues | None = None) -> None:
        original(self, records, began, dues)
        runtime = replicas[0].runtime
        assert runtime is not None
        table = runtime.table
        entry = table.entry("dep-5")
        if entry is not None and entry.record.cron == "0 10 * * *":  # after the first chunk
            table.apply(entry.seq + 1, msgspec.structs.replace(
                entry.record, cron="0 11 * * *", version=2))

    monkeypatch.setattr(Ticker, "plan_loaded", plan_loaded)
    async with running(nats_url, prefix, clock=ManualClock(T0)) as replica:
        replicas.append(replica)
        held_load.set()
        await replica.until_ready()
        assert replica.ticker is not None
        assert replica.ticker.next_due("dep-5") == DUE + timedelta(hours=1)
        assert replica.ticker.next_due("dep-4") == DUE

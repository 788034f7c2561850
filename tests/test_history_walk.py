"""The whole Run history, read page by page, against the Runs that were made.

Guarantee 7 (``list_runs``: a deployment's Runs of every trigger, newest first) holds for a
reader that pages to the end with ``before`` cursors, however the Runs were made: one after
the other or at once, by one replica or several, microseconds or minutes apart, of every
trigger, read by a replica that made them or one started afterwards, while Runs are added
or dropped by retention. Each test reads everything back (tests/harness/walks.py) and
compares it with what was made: the same Runs, each once, newest first by
``(created_at, run_id)``, every page full but the last.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nats_scheduler import NatsSchedulerProvider
from nats_scheduler.clock import ManualClock
from nats_scheduler.core import runcore
from nats_scheduler.core.events import encode
from nats_scheduler.names import (
    HDR_MSG_ID,
    Names,
    index_msg_id,
    random_run_id,
    scheduled_run_id,
)
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.seam import EnqueueRequest, Run, RunPayload, Schedule, Trigger
from tests.harness.servers import NatsCluster, connect_fast, unique_prefix
from tests.harness.walks import assert_whole, key, walk
from tests.providers import eventually, running

pytestmark = pytest.mark.anyio

PAYLOAD = RunPayload("agent:test", "summarise")
_FAR_MONTH = (datetime.now(UTC).month + 5) % 12 + 1
DUE = f"* * * {_FAR_MONTH} *"
"""Due every minute of one month half a year from now. The tests fire past due times (in
2001) by hand, and no clock of theirs, real or hand-driven, reaches a due time of the
Schedule's own: a daily Schedule due at midnight UTC fired the midnight a test crossed (a Run
nobody made, listed among the ones compared: a test run late in the UTC day failed)."""
FIRST_DUE = datetime(2001, _FAR_MONTH, 1, tzinfo=UTC)
IDS = itertools.count()


def schedule(dep: str, cron: str = DUE) -> Schedule:
    return Schedule(dep, dep, cron, "UTC", True, PAYLOAD, 1)


def due_time(n: int) -> datetime:
    """The n-th due time of :data:`DUE` in 2001 (all long past; n < 40,320: a month of
    minutes)."""
    return FIRST_DUE + timedelta(minutes=n)


def reader(provider: NatsSchedulerProvider, dep: str):  # type: ignore[no-untyped-def]
    async def read(before: str | None, limit: int) -> list[Run]:
        return await provider.list_runs(dep, limit=limit, before=before)
    return read


async def run_now(provider: NatsSchedulerProvider, dep: str) -> Run:
    return await provider.enqueue(EnqueueRequest(dep, Trigger.RUN_NOW))


# ============================================================ the reported cases, on one replica


@pytest.mark.parametrize("limit", [1, 7, 50, 1000])
async def test_scheduled_runs_fired_one_after_another_page_completely(
    nats_url: str, limit: int
) -> None:
    """300 due times fired one after the other, milliseconds apart (the report: 249 of 300
    listed at 50 a page, every page after the first a third short)."""
    async with running(nats_url, unique_prefix()) as provider:
        await provider.apply(schedule("seq"))
        made = [await provider.fire_due("seq", due_time(n)) for n in range(300)]
        pages = await walk(reader(provider, "seq"), limit)
        assert_whole(pages, [r for r in made if r is not None], limit)


async def test_scheduled_runs_fired_at_once_page_completely(nats_url: str) -> None:
    """2,000 due times of one deployment fired by 128 concurrent ``fire_due`` calls, and
    another 1,000 by ``fire_many`` (a busy replica), mixed with Run nows: every page full,
    every Run once (the report: 627 to 671 of 3,000, then an empty page)."""
    async with running(nats_url, unique_prefix()) as provider:
        await provider.apply(schedule("busy"))
        limit_calls = asyncio.Semaphore(128)

        async def fire(n: int) -> Run | None:
            async with limit_calls:
                return await provider.fire_due("busy", due_time(n))

        fired = await asyncio.gather(*(fire(n) for n in range(2000)))
        await provider.fire_many([("busy", due_time(n)) for n in range(2000, 3000)])
        nows = await asyncio.gather(*(run_now(provider, "busy") for _ in range(100)))
        made = [r for r in fired if r is not None] + list(nows)
        made += [await provider.get_run(scheduled_run_id("busy", due_time(n)))
                 for n in range(2000, 3000)]
        for limit in (50, 333):
            assert_whole(await walk(reader(provider, "busy"), limit), made, limit)


# ============================================================ property: any way Runs are made

OPS = st.lists(
    st.tuples(
        st.sampled_from(["schedule", "schedule", "again", "run_now", "replay"]),
        st.integers(0, 1),  # which replica
        st.sampled_from([0.0, 0.000001, 0.001, 180.0]),  # the clock moves this far first
    ),
    min_size=1, max_size=40)
LIMITS = st.one_of(st.integers(1, 9), st.sampled_from([50, 1000]))


@pytest.fixture(scope="module")
def replicas(nats_server: NatsServer) -> Iterator[tuple[BlockingPortal, list[NatsSchedulerProvider],
                                                        ManualClock]]:
    """Two replicas of one namespace on one hand-driven clock, in a blocking portal's loop
    (hypothesis drives them from a synchronous test)."""
    clock = ManualClock(datetime.now(UTC).replace(microsecond=0))
    prefix = unique_prefix()
    with start_blocking_portal(backend="asyncio") as portal, \
            portal.wrap_async_context_manager(running(nats_server.url, prefix, clock=clock)) as a, \
            portal.wrap_async_context_manager(running(nats_server.url, prefix, clock=clock)) as b:
        yield portal, [a, b], clock


async def _make(providers: list[NatsSchedulerProvider], clock: ManualClock, dep: str,
                ops: list[tuple[str, int, float]], together: int) -> list[Run]:
    """Carry out ``ops`` on ``dep``, ``together`` at a time; the Runs they returned."""
    made: list[Run] = []
    due = itertools.count()
    last_due: list[datetime] = []

    async def one(kind: str, replica: int) -> Run | None:
        provider = providers[replica]
        if kind in ("schedule", "again"):
            when = last_due[-1] if kind == "again" and last_due else due_time(next(due))
            last_due.append(when)
            return await provider.fire_due(dep, when)
        if kind == "replay" and made:
            return await provider.enqueue(EnqueueRequest(dep, Trigger.REPLAY,
                                                         replay_of=made[0].run_id))
        return await run_now(provider, dep)

    for start in range(0, len(ops), together):
        chunk = ops[start:start + together]
        for _, _, advance in chunk:
            clock.advance(advance)
        results = await asyncio.gather(*(one(kind, replica) for kind, replica, _ in chunk))
        made.extend(r for r in results if r is not None)
    return made


@settings(deadline=None, max_examples=25, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(ops=OPS, together=st.sampled_from([1, 3, 16]), limit=LIMITS)
def test_any_history_pages_completely_from_every_replica(
    replicas: tuple[BlockingPortal, list[NatsSchedulerProvider], ManualClock],
    ops: list[tuple[str, int, float]], together: int, limit: int,
) -> None:
    """Scheduled Runs (one due time fired by both replicas included), Run nows and Replays,
    made one after the other or at once, on two replicas whose clock stands still, steps by
    a microsecond or by minutes: read from either replica, every page lists them all."""
    portal, providers, clock = replicas
    dep = f"walk-{next(IDS)}"
    portal.call(providers[0].apply, schedule(dep))
    portal.call(eventually, lambda: providers[1].schedules.get(dep) is not None)
    made = portal.call(_make, providers, clock, dep, ops, together)
    by_id: dict[str, Run] = {}
    for run in made:
        assert by_id.setdefault(run.run_id, run).created_at == run.created_at
    newest_first = sorted(by_id.values(), key=key, reverse=True)
    for provider in providers:
        pages = portal.call(walk, reader(provider, dep), limit)
        assert_whole(pages, by_id.values(), limit)
        # A cursor that is the newest Run, and one that is the oldest.
        after_newest = portal.call(reader(provider, dep), newest_first[0].run_id, limit)
        assert [r.run_id for r in after_newest] == [r.run_id for r in newest_first[1:limit + 1]]
        assert portal.call(reader(provider, dep), newest_first[-1].run_id, limit) == []


# ============================================================ while the history changes


async def test_runs_made_while_paging_never_repeat_or_skip_the_others(nats_url: str) -> None:
    """A reader pages while both replicas keep firing due times and Run nows: it lists
    every Run that existed when it began exactly once, in order, and nothing made since
    (those are newer than its cursor)."""
    prefix = unique_prefix()
    async with running(nats_url, prefix) as a, running(nats_url, prefix) as b:
        await a.apply(schedule("live"))
        await eventually(lambda: b.schedules.get("live") is not None)
        made = [await (a if n % 2 else b).fire_due("live", due_time(n)) for n in range(150)]
        made += await asyncio.gather(*(run_now(a, "live") for _ in range(50)))
        due = itertools.count(1000)

        async def more() -> None:
            await asyncio.gather(b.fire_due("live", due_time(next(due))), run_now(a, "live"),
                                 a.fire_due("live", due_time(next(due))))

        pages = await walk(reader(a, "live"), 30, between=more)
        assert_whole(pages, [r for r in made if r is not None], 30)


async def test_retention_dropping_the_oldest_while_paging(nats_url: str) -> None:
    """The history keeps the newest 80 Runs; a reader pages while new Runs push the oldest
    out. Nothing is listed twice or out of order, every Run listed existed, and every Run
    that was there at the start and is still there at the end is listed; a cursor that
    left the history meanwhile gives an empty page (all older Runs left before it)."""
    prefix = unique_prefix()
    async with running(nats_url, prefix, retention_runs=80,
                       retention_interval=3600.0) as provider:
        await provider.apply(schedule("kept"))
        for n in range(200):
            await provider.fire_due("kept", due_time(n))
        start = await walk(reader(provider, "kept"), 1000)
        before = {r.run_id: r for r in start[0]}
        assert len(before) == 80
        made: dict[str, Run] = dict(before)
        due = itertools.count(5000)

        async def more() -> None:
            for _ in range(7):
                run = await provider.fire_due("kept", due_time(next(due)))
                assert run is not None
                made[run.run_id] = run

        pages = await walk(reader(provider, "kept"), 9, between=more)
        listed = [r for page in pages for r in page]
        assert len({r.run_id for r in listed}) == len(listed)
        assert [key(r) for r in listed] == sorted((key(r) for r in listed), reverse=True)
        assert {r.run_id for r in listed} <= set(made)
        end = {r.run_id for r in (await walk(reader(provider, "kept"), 1000))[0]}
        assert (set(before) & end) <= {r.run_id for r in listed}
        oldest_gone = min(before.values(), key=key)
        assert oldest_gone.run_id not in end
        assert await provider.list_runs("kept", limit=5, before=oldest_gone.run_id) == []


# ============================================================ cold reads and a cluster


async def test_a_replica_started_after_the_history_pages_it_whole(nats_url: str) -> None:
    """Runs of every trigger made by one replica (bursts, one at a time, at once), read by a
    replica started afterwards that holds none of them."""
    prefix = unique_prefix()
    async with running(nats_url, prefix) as maker:
        await maker.apply(schedule("cold"))
        made = [await maker.fire_due("cold", due_time(n)) for n in range(120)]
        await maker.fire_many([("cold", due_time(n)) for n in range(120, 520)])
        made += [await maker.get_run(scheduled_run_id("cold", due_time(n)))
                 for n in range(120, 520)]
        made += await asyncio.gather(*(run_now(maker, "cold") for _ in range(60)))
        first = made[0]
        assert first is not None
        made.append(await maker.enqueue(EnqueueRequest("cold", Trigger.REPLAY,
                                                       replay_of=first.run_id)))
        await maker.wait_idle(timeout=30)
    async with running(nats_url, prefix) as fresh:
        assert all(fresh.ledger.get(r.run_id) is None for r in made[:400] if r is not None)
        for limit in (1, 50, 1000):
            pages = await walk(reader(fresh, "cold"), limit)
            assert_whole(pages, [r for r in made if r is not None], limit)


@pytest.mark.slow
async def test_history_pages_whole_on_a_three_node_cluster(nats_cluster: NatsCluster) -> None:
    """Two replicas on different nodes of an R3 store fire the same due times at once
    (one Run each) and their own Run nows: read from either, every page lists them all."""
    prefix = unique_prefix()
    nodes = nats_cluster.url_list
    async with running(nodes[0], prefix, replicas=3) as a, \
            running(nodes[2], prefix, replicas=3) as b:
        await a.apply(schedule("r3"))
        await eventually(lambda: b.schedules.get("r3") is not None)
        rng = random.Random(3)
        made: list[Run | None] = []
        for start in range(0, 240, 24):
            batch = range(start, start + 24)
            made += await asyncio.gather(*(p.fire_due("r3", due_time(n))
                                           for n in batch for p in (a, b)),
                                         *(run_now(rng.choice((a, b)), "r3") for _ in range(4)))
        for provider in (a, b):
            assert_whole(await walk(reader(provider, "r3"), 25), [r for r in made if r], 25)


# ============================================================ histories of releases before 0.2


@dataclass(frozen=True)
class LegacyRun:
    """A finished Run as a release before 0.2 stored it."""

    run_id: str
    entry_at: datetime
    """Its index entry's stamp (the firing's Schedule read, shared by a batch)."""
    run_at: datetime
    """Its own ``created_at`` (the create's instant)."""
    indexed: bool
    """Whether the Run records its entry's sequence (``index_seq``)."""


async def store_legacy_runs(url: str, prefix: str, dep: str, plan: list[LegacyRun]) -> list[Run]:
    """Store ``plan``'s entries in its order (without ``ordered``), then each Run's events."""
    names = Names(prefix)
    nc = await connect_fast(url)
    made: list[Run] = []
    try:
        js = nc.jetstream(timeout=10)
        acks = [await js.publish_async(
                    names.index_subject(dep),
                    msgspec.json.encode({"run_id": r.run_id, "created_at": r.entry_at}),
                    headers={HDR_MSG_ID: index_msg_id(r.run_id)}) for r in plan]
        await js.publish_async_completed()
        for r, ack in zip(plan, acks, strict=True):
            created = runcore.indexed(runcore.create(
                run_id=r.run_id, deployment_id=dep, trigger=Trigger.RUN_NOW, due_at=None,
                payload=PAYLOAD, now=r.run_at, actor="old-release"),
                (await ack).seq if r.indexed else None)
            claimed = runcore.claim(created.run, holder="old-release", now=r.run_at)
            done = runcore.dispatched(claimed.run, turn_id="t", now=r.run_at,
                                      actor="old-release")
            for event in (created, claimed, done):
                await js.publish_async(names.run_subject(dep, r.run_id), encode(event))
            made.append(done.run.to_run())
        await js.publish_async_completed()
    finally:
        await nc.close()
    return made


LEGACY_GROUPS = st.lists(
    st.tuples(
        st.integers(1, 30),  # Runs fired together (one firing batch)
        st.sampled_from([timedelta(0), timedelta(microseconds=1), timedelta(milliseconds=1),
                         timedelta(seconds=1), timedelta(minutes=3)]),  # since the last batch
        st.sampled_from([timedelta(0), timedelta(milliseconds=2),
                         timedelta(seconds=5)]),  # from the entries' stamp to the creates'
        st.booleans(),  # whether the Runs recorded their entry's sequence (later releases did)
    ),
    min_size=1, max_size=8)


@pytest.fixture(scope="module")
def legacy_reader(nats_server: NatsServer) -> Iterator[tuple[BlockingPortal,
                                                             NatsSchedulerProvider, str]]:
    """A replica of a namespace whose history an older release wrote (stored by hand)."""
    prefix = unique_prefix()
    with start_blocking_portal(backend="asyncio") as portal, \
            portal.wrap_async_context_manager(running(nats_server.url, prefix)) as provider:
        yield portal, provider, nats_server.url


@settings(deadline=None, max_examples=20, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(groups=LEGACY_GROUPS, seed=st.integers(0, 2**32), limit=LIMITS)
def test_histories_written_before_0_2_page_completely(
    legacy_reader: tuple[BlockingPortal, NatsSchedulerProvider, str],
    groups: list[tuple[int, timedelta, timedelta, bool]], seed: int, limit: int,
) -> None:
    """The way releases before 0.2 wrote a burst: every entry of a firing batch stamped with
    one instant (the Schedule read's), every Run with a later one (its create's), entries
    stored a little out of order (several replicas, several batches in flight), Runs with
    and without their entry's sequence: a reader of this release pages through them all."""
    portal, provider, url = legacy_reader
    dep = f"legacy-{next(IDS)}"
    portal.call(provider.apply, schedule(dep))
    rng = random.Random(seed)
    at = datetime.now(UTC) - timedelta(days=1)
    plan: list[LegacyRun] = []
    for size, step, to_create, indexed in groups:
        at += step
        for _ in range(size):
            plan.append(LegacyRun(run_id=random_run_id(), entry_at=at, run_at=at + to_create,
                                  indexed=indexed))
    # stored out of order by up to 10 s: replicas and batches interleave
    plan.sort(key=lambda r: r.entry_at + timedelta(seconds=rng.uniform(-5, 5)))
    made = portal.call(store_legacy_runs, url, provider.settings.prefix, dep, plan)
    assert_whole(portal.call(walk, reader(provider, dep), limit), made, limit)

"""The store's ports (``nats_scheduler/ports``) held to their contract, on both stores.

:class:`PortsContract` states each promise as a test through the ports alone; it is bound to
the JetStream store on a real nats-server (:class:`TestJetStreamPorts`) and to the in-memory
store the simulation runs on (:class:`TestMemoryPorts`). The in-memory store is trusted in
the simulation because it keeps the same promises here, the way a conditional append loses,
a compare-and-set refuses, a lease expires and a feed delivers included.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from nats_scheduler.core import runcore, schedulecore
from nats_scheduler.core.events import RunRecord, ScheduleRecord
from nats_scheduler.jetstream.ports import JetStreamPorts, open_store
from nats_scheduler.memory.ports import MemoryPorts
from nats_scheduler.memory.store import MemoryStore
from nats_scheduler.names import scheduled_create_msg_id, scheduled_run_id
from nats_scheduler.ports import StorePorts
from nats_scheduler.ports.checkpoints import CheckpointHead, CheckpointUnusable, TableCheckpoints
from nats_scheduler.ports.leases import FREE
from nats_scheduler.ports.runs import Conflict
from nats_scheduler.projections.ledger import Ledger
from nats_scheduler.projections.schedule_table import ScheduleTable
from nats_scheduler.seam import RunPayload, Schedule, Trigger
from tests.harness.servers import unique_prefix
from tests.harness.walks import assert_whole, walk
from tests.providers import eventually, settings

pytestmark = pytest.mark.anyio

PAYLOAD = RunPayload("agent:test", "summarise")
LEASE = 0.6
"""Seconds of a lease in these tests (its expiry is judged on real elapsed time)."""
DUE = datetime(2030, 1, 1, 3, tzinfo=UTC)
IDS = itertools.count()


class Clock:
    """The processes' clock: real time (lease values and stamps), UTC."""

    follows_wall_time = False

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep_until(self, instant: datetime) -> None:
        await asyncio.sleep(max(0.0, (instant - self.now()).total_seconds()))


Foreign = Callable[..., Awaitable[None]]
"""Stores a foreign message (not the provider's own) where a reader looks: ``("run", dep,
run_id)``, ``("schedule", dep)``, ``("index", dep)``, ``("lease", run_id)``,
``("head",)`` (the newest checkpoint head)."""


@dataclass
class Process:
    """One process's ports and its projections, and how a foreign message gets into its
    store (each binding writes one the way its store holds it)."""

    ports: StorePorts
    ledger: Ledger
    table: ScheduleTable
    identity: str
    foreign: Foreign


World = Callable[[str], contextlib.AbstractAsyncContextManager[Process]]


def created(dep: str, due: datetime, at: datetime, *, holder: str | None = None):  # type: ignore[no-untyped-def]
    return runcore.create(run_id=scheduled_run_id(dep, due), deployment_id=dep,
                          trigger=Trigger.SCHEDULE, due_at=due, payload=PAYLOAD, now=at,
                          actor="contract", holder=holder)


async def announced_run(p: Process, dep: str, due: datetime, at: datetime) -> RunRecord:
    """A scheduled Run announced (its history entry, its key), then created, as firing does."""
    announced = await p.ports.runs.announce(created(dep, due, at).run)
    event = runcore.indexed(created(dep, due, at), announced.index_seq, announced.created_at)
    return (await p.ports.runs.create(event, msg_id=scheduled_create_msg_id(dep, due))).run


@dataclass(frozen=True)
class TableEntry:
    """One Schedule as a table holds it (``ports.checkpoints.Entry``)."""

    seq: int
    record: ScheduleRecord


def table_entries(count: int) -> list[TableEntry]:
    """``count`` Schedules as a table would hold them, at positions 3, 6, 9, ..."""
    now = datetime.now(UTC)
    out = []
    for i in range(count):
        dep = f"k{i:05d}"
        applied = schedulecore.decide_apply(None, Schedule(
            dep, dep if i % 3 else f"named {i}", f"{i % 60} * * * *", "Europe/Paris", True,
            RunPayload("agent:test", f"prompt {i}"), 1), now=now, actor="contract")
        assert applied is not None
        out.append(TableEntry(3 * (i + 1), applied.schedule))
    return out


async def read_rows(checkpoints: TableCheckpoints, head: CheckpointHead
                    ) -> list[tuple[int, ScheduleRecord]]:
    """A checkpoint's rows, read whole, as (position, record)."""
    return [(row.seq, row.record()) async for rows in checkpoints.rows(head) for row in rows]


def history_pages(p: Process, dep: str) -> Callable[[str | None, int], Awaitable[list[RunRecord]]]:
    """One page of a deployment's history as ``walk`` asks for it (newest first)."""

    async def read(before: str | None, limit: int) -> list[RunRecord]:
        return (await p.ports.history.page(dep, limit, before, None, datetime.now(UTC))).runs

    return read


@contextlib.asynccontextmanager
async def runs_feed(p: Process):  # type: ignore[no-untyped-def]
    """A feed of the Runs stream from its end on, subscribed, stopped on the way out."""
    feed = p.ports.runs.feed(from_seq=await p.ports.runs.end() + 1)
    await feed.subscribe()
    try:
        yield feed
    finally:
        await feed.stop()


class PortsContract:
    """Every promise of the ports; subclasses give :meth:`world` (processes on one store)."""

    @pytest.fixture
    def world(self) -> World:  # pragma: no cover - bound by the subclasses
        raise NotImplementedError

    # ------------------------------------------------------------------ the Run journal

    async def test_of_concurrent_creates_of_one_run_exactly_one_is_stored(
        self, world: World
    ) -> None:
        dep = f"c{next(IDS)}"
        async with world("a") as a, world("b") as b:
            now = datetime.now(UTC)
            events = [created(dep, DUE, now + timedelta(microseconds=i)) for i in range(2)]
            results = await asyncio.gather(*(
                p.ports.runs.create(e, msg_id=scheduled_create_msg_id(dep, DUE))
                for p, e in zip((a, b), events, strict=True)))
            assert sorted(r.created for r in results) == [False, True]
            assert results[0].run == results[1].run  # both hold the one stored
            again = await a.ports.runs.create(created(dep, DUE, now + timedelta(hours=1)),
                                              msg_id="another")
            assert not again.created and again.run == results[0].run

    async def test_a_later_event_is_appended_only_on_the_position_its_writer_saw(
        self, world: World
    ) -> None:
        dep = f"a{next(IDS)}"
        async with world("a") as a, world("b") as b:
            now = datetime.now(UTC)
            stored = await a.ports.runs.create(created(dep, DUE, now), msg_id="m")
            claimed = runcore.claim(stored.run, holder="a", now=now)
            seq = await a.ports.runs.append(stored.seq, claimed)
            with pytest.raises(Conflict):  # b still saw the create
                await b.ports.runs.append(stored.seq, runcore.claim(stored.run, holder="b",
                                                                   now=now))
            fetched = await b.ports.runs.fetch(dep, stored.run.run_id)
            assert fetched == (seq, claimed.run)
            assert await b.ports.runs.find(stored.run.run_id) == fetched
            assert await b.ports.runs.fetch("elsewhere", stored.run.run_id) is None
            first = await b.ports.runs.first_stored_at(dep, stored.run.run_id)
            assert first is not None and abs((first - now).total_seconds()) < 60

    async def test_every_announcer_of_a_run_gets_one_entry_and_one_lease_between_them(
        self, world: World
    ) -> None:
        dep = f"n{next(IDS)}"
        async with world("a") as a, world("b") as b:
            run = created(dep, DUE, datetime.now(UTC)).run
            both = await asyncio.gather(a.ports.runs.announce(run), b.ports.runs.announce(run))
            assert both[0].index_seq == both[1].index_seq
            assert both[0].created_at == both[1].created_at
            assert [x.lease is not None for x in both].count(True) == 1

    async def test_the_feed_applies_other_processes_events_and_a_writers_own_at_once(
        self, world: World
    ) -> None:
        dep = f"f{next(IDS)}"
        async with world("a") as a, world("b") as b, runs_feed(b) as feed:
            stored = await a.ports.runs.create(created(dep, DUE, datetime.now(UTC)),
                                               msg_id="m")
            assert a.ledger.get(stored.run.run_id) == stored.run  # read your writes
            await eventually(lambda: b.ledger.get(stored.run.run_id) == stored.run,
                             timeout=10)
            assert feed.applied_seq >= stored.seq

    # ------------------------------------------------------------------ the history

    async def test_runs_announced_by_two_processes_at_once_page_whole_in_order(
        self, world: World
    ) -> None:
        dep = f"h{next(IDS)}"
        async with world("a") as a, world("b") as b:
            at = datetime.now(UTC)

            made = await asyncio.gather(*(announced_run(p, dep, DUE + timedelta(days=n), at)
                                          for n in range(40) for p in (a, b)))

            for limit in (1, 7, 100):
                assert_whole(await walk(history_pages(b, dep), limit),
                             {r.run_id: r for r in made}.values(), limit)

    # ------------------------------------------------------------------ foreign messages

    async def test_a_foreign_message_after_a_runs_event_is_skipped_and_written_after(
        self, world: World
    ) -> None:
        dep = f"x{next(IDS)}"
        async with world("a") as a, world("b") as b, runs_feed(b) as feed:
            now = datetime.now(UTC)
            stored = await a.ports.runs.create(created(dep, DUE, now), msg_id="m")
            await a.foreign("run", dep, stored.run.run_id)
            fetched = await b.ports.runs.fetch(dep, stored.run.run_id)
            assert fetched == (stored.seq, stored.run)  # its last event of ours
            claimed = runcore.claim(stored.run, holder="a", now=now)
            seq = await a.ports.runs.append(stored.seq, claimed)  # after the foreign one
            assert await b.ports.runs.find(stored.run.run_id) == (seq, claimed.run)
            await eventually(lambda: b.ledger.get(stored.run.run_id) == claimed.run,
                             timeout=10)
            assert feed.poisoned == 1  # skipped and counted, never applied
            with pytest.raises(Conflict):  # a writer behind the Run still loses
                await b.ports.runs.append(stored.seq, runcore.claim(stored.run,
                                                                   holder="b", now=now))

    async def test_a_run_whose_subject_holds_only_foreign_messages_is_created_once(
        self, world: World
    ) -> None:
        dep = f"y{next(IDS)}"
        async with world("a") as a, world("b") as b:
            run_id = scheduled_run_id(dep, DUE)
            await a.foreign("run", dep, run_id)
            assert await b.ports.runs.fetch(dep, run_id) is None
            now = datetime.now(UTC)
            results = await asyncio.gather(*(
                p.ports.runs.create(created(dep, DUE, now + timedelta(microseconds=i)),
                                    msg_id=f"m{i}")
                for i, p in enumerate((a, b))))
            assert sorted(r.created for r in results) == [False, True]
            assert results[0].run == results[1].run
            first = await b.ports.runs.first_stored_at(dep, run_id)
            assert first is not None

    async def test_a_schedule_whose_last_message_is_foreign_is_read_changed_and_followed(
        self, world: World
    ) -> None:
        dep = f"z{next(IDS)}"
        async with world("a") as a:
            at = datetime.now(UTC)

            def applied(version: int):  # type: ignore[no-untyped-def]
                return lambda current: schedulecore.decide_apply(
                    current, Schedule(dep, dep, "0 3 * * *", "UTC", True, PAYLOAD, version),
                    now=at, actor="contract")

            await a.ports.schedules.write(dep, applied(1))
            await a.foreign("schedule", dep)
            assert (await a.ports.schedules.read(dep)).version == 1  # type: ignore[union-attr]
            async with world("b") as b:  # a start: the feed's replay meets the foreign one
                seen: dict[str, int] = {}
                feed = b.ports.schedules.feed(
                    lambda seq, record: seen.__setitem__(record.deployment_id, record.version))
                await feed.subscribe()
                try:
                    await feed.caught_up(10)
                    await b.ports.schedules.settled()
                    assert seen.get(dep) == 1
                    assert (await b.ports.schedules.write(dep, applied(2))).version == 2  # type: ignore[union-attr]
                    await eventually(lambda: seen.get(dep) == 2, timeout=10)
                finally:
                    await feed.stop()

    async def test_a_foreign_index_entry_is_skipped_by_every_page(self, world: World) -> None:
        dep = f"i{next(IDS)}"
        async with world("a") as a, world("b") as b:
            at = datetime.now(UTC)
            made = []
            for n in range(6):
                made.append(await announced_run(a, dep, DUE + timedelta(days=n), at))
                if n in (0, 2, 5):
                    await a.foreign("index", dep)  # first, between, last

            for limit in (1, 4, 100):
                assert_whole(await walk(history_pages(b, dep), limit), made, limit)

    async def test_a_foreign_lease_value_is_anyones_to_take_at_once(self, world: World) -> None:
        async with world("a") as a, world("b") as b:
            run_id = f"l{next(IDS)}"
            await a.foreign("lease", run_id)
            current = await b.ports.leases.current(run_id)
            assert current is not None and b.ports.leases.expired(current[1])
            taken = await b.ports.leases.acquire(run_id)
            assert taken is not None and taken[0].value.holder == b.identity
            fresh = f"l{next(IDS)}"
            await a.foreign("lease", fresh)
            announced = await a.ports.runs.announce(created(fresh, DUE, datetime.now(UTC)).run)
            assert announced.lease is None or announced.lease.value.holder == a.identity

    async def test_a_foreign_checkpoint_head_is_skipped_and_written_after(
        self, world: World
    ) -> None:
        async with world("a") as a:
            checkpoints = a.ports.checkpoints
            assert checkpoints is not None
            created_at = await checkpoints.journal_created()
            first = await checkpoints.write(table_entries(3), schedules_seq=9,
                                            schedules_created=created_at, previous=0, by="a",
                                            now=datetime.now(UTC))
            assert first is not None
            await a.foreign("head")
            latest = await checkpoints.latest()
            assert latest is not None and latest[1] == first
            second = await checkpoints.write(table_entries(4), schedules_seq=12,
                                             schedules_created=created_at, previous=latest[0],
                                             by="a", now=datetime.now(UTC))
            assert second is not None and (await checkpoints.latest())[1] == second  # type: ignore[index]

    # ------------------------------------------------------------------ the leases

    async def test_a_renewed_lease_is_never_taken_and_an_unrenewed_one_by_exactly_one(
        self, world: World
    ) -> None:
        run_id = f"l{next(IDS)}"
        async with world("a") as a, world("b") as b, world("c") as c:
            lease = await a.ports.leases.announce(run_id)
            assert lease is not None
            assert await b.ports.leases.announce(run_id) is None
            assert await b.ports.leases.acquire(run_id) is None  # first seen: not expired
            for _ in range(3):  # renewed every third of a lease: never expires for b
                await asyncio.sleep(LEASE / 3)
                renewed = await a.ports.leases.renew(lease)
                assert renewed is not None
                lease = renewed
                assert await b.ports.leases.acquire(run_id) is None
            assert await c.ports.leases.acquire(run_id) is None  # c starts observing
            for _ in range(6):  # a stops renewing; b and c look as their sweeps do
                await asyncio.sleep(LEASE / 5)
                for p in (b, c):
                    assert await p.ports.leases.current(run_id) is not None
            taken = await asyncio.gather(b.ports.leases.acquire(run_id),
                                         c.ports.leases.acquire(run_id))
            winners = [t for t in taken if t is not None]
            assert len(winners) == 1 and winners[0][1] == "a"
            assert await a.ports.leases.renew(lease) is None  # a's lease is lost

    async def test_a_lease_unread_for_a_while_counts_from_the_next_read(
        self, world: World
    ) -> None:
        """A reader that could not look (the store down) gives the holder a lease length
        after it looks again: the holder could not renew meanwhile either."""
        run_id = f"g{next(IDS)}"
        async with world("a") as a, world("b") as b:
            assert await a.ports.leases.announce(run_id) is not None
            current = await b.ports.leases.current(run_id)
            assert current is not None and not b.ports.leases.expired(current[1])
            await asyncio.sleep(LEASE * 1.2)  # b does not look
            counted_from = asyncio.get_running_loop().time()  # the count starts after this
            current = await b.ports.leases.current(run_id)
            assert current is not None and not b.ports.leases.expired(current[1])
            assert await b.ports.leases.acquire(run_id) is None
            # Read steadily until it expires: a lease length after the read above at the
            # soonest, and later when a loaded machine stalls the reader for half a lease
            # (its count starts again then, as it must). Bounded: it does expire.
            deadline = counted_from + 60 * LEASE
            while not (current is not None and b.ports.leases.expired(current[1])):
                assert asyncio.get_running_loop().time() < deadline, "the lease never expired"
                await asyncio.sleep(LEASE / 10)
                current = await b.ports.leases.current(run_id)
            assert asyncio.get_running_loop().time() - counted_from >= LEASE * 0.99

    async def test_a_lease_given_back_unfinished_is_anyones_at_once(self, world: World) -> None:
        run_id = f"r{next(IDS)}"
        async with world("a") as a, world("b") as b:
            lease = await a.ports.leases.announce(run_id)
            assert lease is not None
            assert run_id in await b.ports.leases.open_runs()
            await a.ports.leases.release(lease, finished=False)
            current = await b.ports.leases.current(run_id)
            assert current is not None and current[1].holder == FREE
            taken = await b.ports.leases.acquire(run_id)
            assert taken is not None and taken[0].value.holder == "b"
            await b.ports.leases.forget(run_id)
            assert run_id not in await a.ports.leases.open_runs()

    # ------------------------------------------------------------------ the Schedule journal

    async def test_concurrent_schedule_changes_are_each_decided_on_the_stored_state(
        self, world: World
    ) -> None:
        dep = f"s{next(IDS)}"
        async with world("a") as a, world("b") as b:
            at = datetime.now(UTC)

            def bump(current):  # type: ignore[no-untyped-def]
                version = 0 if current is None else current.version
                schedule = Schedule(dep, dep, "0 3 * * *", "UTC", True, PAYLOAD, version + 1)
                return schedulecore.decide_apply(current, schedule, now=at, actor="contract")

            await asyncio.gather(*(p.ports.schedules.write(dep, bump)
                                   for _ in range(5) for p in (a, b)))
            stored = await b.ports.schedules.read(dep)
            assert stored is not None and stored.version == 10  # no change lost
            assert (await a.ports.schedules.as_of(dep, at - timedelta(days=1))) is None
            assert (await a.ports.schedules.end_once()) >= 10

    async def test_the_schedule_feed_gives_the_last_state_of_each_then_every_change(
        self, world: World
    ) -> None:
        dep = f"t{next(IDS)}"
        async with world("a") as a, world("b") as b:
            at = datetime.now(UTC)

            def applied(version: int):  # type: ignore[no-untyped-def]
                return lambda current: schedulecore.decide_apply(
                    current, Schedule(dep, dep, "0 3 * * *", "UTC", True, PAYLOAD, version),
                    now=at, actor="contract")

            await a.ports.schedules.write(dep, applied(1))
            seen: list[int] = []
            feed = b.ports.schedules.feed(
                lambda seq, record: seen.append(record.version)
                if record.deployment_id == dep else None)
            await feed.subscribe()
            try:
                await feed.caught_up(10)
                await a.ports.schedules.write(dep, applied(2))
                await eventually(lambda: seen[-1:] == [2], timeout=10)
                assert seen[0] == 1
            finally:
                await feed.stop()

    # ------------------------------------------------------------------ the checkpoints

    async def test_a_checkpoint_reads_back_whole_as_written_and_the_newest_counts(
        self, world: World
    ) -> None:
        async with world("a") as a, world("b") as b:
            ca, cb = a.ports.checkpoints, b.ports.checkpoints
            assert ca is not None and cb is not None
            assert await ca.latest() is None
            created = await ca.journal_created()
            assert await cb.journal_created() == created
            entries = table_entries(2_500)
            now = datetime.now(UTC).replace(microsecond=0)
            head = await ca.write(entries, schedules_seq=7_000, schedules_created=created,
                                  previous=0, by="a", now=now)
            assert head is not None
            assert (head.schedules_seq, head.schedules_created, head.schedules, head.by,
                    head.written_at) == (7_000, created, 2_500, "a", now)
            latest = await cb.latest()
            assert latest is not None and latest[1] == head
            assert await read_rows(cb, head) == [(e.seq, e.record) for e in entries]
            for broken in (msgspec.structs.replace(head, parts=head.parts + 1),
                           msgspec.structs.replace(head, schedules=head.schedules + 1)):
                with pytest.raises(CheckpointUnusable):
                    await read_rows(cb, broken)
            newer = await cb.write(entries[:10], schedules_seq=7_010, schedules_created=created,
                                   previous=latest[0], by="b", now=now)
            assert newer is not None
            again = await ca.latest()
            assert again is not None and again[1] == newer and again[0] > latest[0]
            assert await read_rows(ca, newer) == [(e.seq, e.record) for e in entries[:10]]

    async def test_of_two_checkpoints_written_on_one_head_exactly_one_stands(
        self, world: World
    ) -> None:
        async with world("a") as a, world("b") as b:
            ca, cb = a.ports.checkpoints, b.ports.checkpoints
            assert ca is not None and cb is not None
            created, now = await ca.journal_created(), datetime.now(UTC)
            mine, theirs = table_entries(1_200), table_entries(1_300)
            heads = await asyncio.gather(
                ca.write(mine, schedules_seq=1, schedules_created=created, previous=0, by="a",
                         now=now),
                cb.write(theirs, schedules_seq=2, schedules_created=created, previous=0,
                         by="b", now=now))
            standing = [h for h in heads if h is not None]
            assert len(standing) == 1
            latest = await ca.latest()
            assert latest is not None and latest[1] == standing[0]
            won = mine if standing[0].by == "a" else theirs
            assert await read_rows(cb, standing[0]) == [(e.seq, e.record) for e in won]

    # ------------------------------------------------------------------ the live replicas

    async def test_replicas_see_each_other_live_and_one_gone_when_it_leaves(
        self, world: World
    ) -> None:
        async with world("a") as a, world("b") as b:
            ma = await a.ports.replicas.open("a", clock=Clock())
            mb = await b.ports.replicas.open("b", clock=Clock())
            await ma.start()
            await mb.start()
            try:
                await eventually(lambda: ma.live() == ("a", "b") == mb.live(), timeout=10)
                await mb.stop()
                await eventually(lambda: ma.live() == ("a",), timeout=10)
            finally:
                await ma.stop()
                await mb.stop()


class TestJetStreamPorts(PortsContract):
    """The ports over a real nats-server (the session's), one namespace per test."""

    @pytest.fixture
    def world(self, nats_url: str) -> World:
        prefix = unique_prefix()

        @contextlib.asynccontextmanager
        async def process(identity: str) -> AsyncIterator[Process]:
            s = settings(nats_url, prefix, lease_seconds=LEASE)
            store = await open_store(s, identity)
            ledger, table = Ledger(), ScheduleTable()
            ports = JetStreamPorts(store, ledger=ledger, table=table, clock=Clock(),
                                   identity=identity)
            names = store.names

            async def foreign(kind: str, *ids: str) -> None:
                subject = {"run": lambda: names.run_subject(*ids),
                           "schedule": lambda: names.schedule_subject(*ids),
                           "index": lambda: names.index_subject(*ids),
                           "lease": lambda: names.lease_subject(*ids),
                           "head": lambda: names.checkpoint_head_subject}[kind]()
                await store.js.publish(subject, b'{"type":"io.nats.jetstream.api.v1.x"}')

            try:
                yield Process(ports, ledger, table, identity, foreign)
            finally:
                await ports.close()

        return process


class TestMemoryPorts(PortsContract):
    """The in-memory ports (the simulation's), every process on one store."""

    @pytest.fixture
    def world(self) -> World:
        store = MemoryStore(clock=Clock(), latency=lambda: 0.0005)

        async def foreign(kind: str, *ids: str) -> None:
            {"run": lambda: store.foreign_run(*ids),
             "schedule": lambda: store.foreign_schedule(*ids),
             "index": lambda: store.foreign_index(*ids),
             "lease": lambda: store.foreign_lease(*ids),
             "head": store.foreign_checkpoint_head}[kind]()

        @contextlib.asynccontextmanager
        async def process(identity: str) -> AsyncIterator[Process]:
            ledger, table = Ledger(), ScheduleTable()
            yield Process(MemoryPorts(store, ledger=ledger, table=table, clock=Clock(),
                                      identity=identity, lease_seconds=LEASE, beat_seconds=0.2),
                          ledger, table, identity, foreign)

        return process

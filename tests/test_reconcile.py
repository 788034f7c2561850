"""``reconcile`` as a diff, on a real server: it writes exactly the changes.

AstraBox calls ``reconcile(every stored Schedule)`` on every replica at every restart, so the
usual call changes nothing: it must store nothing (the Schedule stream's last sequence does
not move). A mixed list stores one event per change and per deletion. A Schedule the
provider refuses (a bad one, a deployment given twice, one more enabled Schedule than the
capacity) is refused alone and writes nothing, whatever its position in the list; the
others are stored (tests/test_reconcile_refusals.py reads every outcome back).
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nats_scheduler.core import schedulecore, validation
from nats_scheduler.core.events import ScheduleRecord
from nats_scheduler.jetstream.schedulelog import ScheduleLog
from nats_scheduler.jetstream.store import StoredMessage
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.ports.schedules import Decide
from nats_scheduler.projections.schedule_table import ScheduleTable
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.runtime import schedule_changes
from nats_scheduler.seam import (
    RunPayload,
    Schedule,
)
from tests.harness.servers import unique_prefix
from tests.providers import running

pytestmark = pytest.mark.anyio

COUNT = 300
NOW = datetime(2030, 1, 1, tzinfo=UTC)


def schedule(i: int, *, prompt: str = "p", enabled: bool = True, version: int = 1) -> Schedule:
    dep = f"dep-{i:04d}"
    return Schedule(dep, dep, f"{i % 60} {i % 24} * * *", "UTC", enabled,
                    RunPayload("agent", prompt), version)


@pytest.fixture
async def provider(nats_server: NatsServer) -> AsyncIterator[NatsSchedulerProvider]:
    async with running(nats_server.url, unique_prefix(), max_active_schedules=COUNT + 5) as p:
        yield p


async def last_seq(provider: NatsSchedulerProvider) -> int:
    return await provider.store.last_seq(provider.store.names.schedules_stream)


async def stored(provider: NatsSchedulerProvider, dep: str) -> ScheduleRecord | None:
    """The Schedule as the stream leader has it."""
    assert provider.runtime is not None
    return await provider.runtime.schedules.read(dep)


async def test_an_unchanged_list_writes_nothing(
    provider: NatsSchedulerProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    wanted = [schedule(i) for i in range(COUNT)]
    await provider.reconcile(wanted)
    assert await last_seq(provider) == COUNT
    await provider.hold("dep-0007", by="ops", reason="incident")
    before = await last_seq(provider)
    reads: list[str] = []
    original = provider.store.last

    async def last(subject: str, stream: str | None = None) -> StoredMessage | None:
        reads.append(subject)
        return await original(subject, stream)

    monkeypatch.setattr(provider.store, "last", last)
    await provider.reconcile(wanted)
    await provider.reconcile(list(reversed(wanted)))
    assert reads == [], "an unchanged Schedule costs no read of its own"
    assert await last_seq(provider) == before
    held = await stored(provider, "dep-0007")
    assert held is not None and held.hold is not None, "reconcile must keep an operator hold"


async def test_a_mixed_list_writes_exactly_the_changes(provider: NatsSchedulerProvider) -> None:
    await provider.reconcile([schedule(i) for i in range(COUNT)])
    await provider.hold("dep-0003", by="ops", reason="incident")
    before = await last_seq(provider)
    wanted = [schedule(i) for i in range(10, COUNT)]  # 0-9 deleted
    wanted[0] = schedule(10, prompt="changed", version=2)  # changed
    wanted[1] = schedule(11, prompt="stale", version=1)  # same version: a no-op
    wanted[2] = schedule(12, prompt="older", version=0)  # version 0 always replaces
    wanted[3] = schedule(13, enabled=False, version=2)  # disabled
    wanted += [schedule(COUNT + 1), schedule(COUNT + 2)]  # new
    await provider.reconcile(wanted)
    assert await last_seq(provider) == before + 10 + 3 + 2
    gone = await stored(provider, "dep-0003")
    assert gone is not None and gone.deleted and gone.hold is None
    for dep, prompt, enabled in [("dep-0010", "changed", True), ("dep-0011", "p", True),
                                 ("dep-0012", "older", True), ("dep-0013", "p", False)]:
        record = await stored(provider, dep)
        assert record is not None and not record.deleted, dep
        assert (record.payload.prompt, record.enabled) == (prompt, enabled), dep
    assert await stored(provider, f"dep-{COUNT + 2:04d}") is not None
    assert provider.schedules.enabled_count() == COUNT - 10 - 1 + 2
    await provider.reconcile(wanted)  # and now it is the unchanged list
    assert await last_seq(provider) == before + 15


async def test_a_bad_schedule_is_refused_alone(provider: NatsSchedulerProvider) -> None:
    await provider.reconcile([schedule(i) for i in range(20)])
    before = await last_seq(provider)
    wanted = [schedule(i, prompt="changed", version=2) for i in range(40)]
    bad = Schedule("dep-bad", "dep-bad", "61 * * * *", "UTC", True, RunPayload("a", "p"), 1)
    huge = Schedule("dep-huge", "dep-huge", "0 3 * * *", "UTC", True,
                    RunPayload("a", "x" * (2 * 1024 * 1024)), 1)
    await provider.reconcile([*wanted[:10], bad, *wanted[10:], huge])
    assert await last_seq(provider) == before + 40
    assert refused(provider) == {"dep-bad": "invalid", "dep-huge": "too_large"}
    assert provider.schedules.get("dep-bad") is None
    assert provider.schedules.get("dep-huge") is None
    record = await stored(provider, "dep-0000")
    assert record is not None and record.payload.prompt == "changed"


def refused(provider: NatsSchedulerProvider) -> dict[str, str]:
    """The deployments this replica's reconciles refused, with the kind of each."""
    assert provider.runtime is not None
    return {r.deployment_id: r.kind for r in provider.runtime.refusals.listed()}


async def test_a_change_is_checked_and_an_unchanged_schedule_is_not_checked_again(
    provider: NatsSchedulerProvider,
) -> None:
    """A stored Schedule given unchanged was checked when it was stored: a restart's
    reconcile of a million does not check each again. A change to it is checked: one bad
    change among unchanged Schedules is refused, and the stored one stays."""
    wanted = [schedule(i) for i in range(30)]
    await provider.reconcile(wanted)
    before = await last_seq(provider)
    bad_change = Schedule("dep-0007", "dep-0007", "61 * * * *", "UTC", True,
                          RunPayload("agent", "p"), 2)
    await provider.reconcile([*wanted[:7], bad_change, *wanted[8:]])
    assert refused(provider) == {"dep-0007": "invalid"}
    assert await last_seq(provider) == before
    kept = await stored(provider, "dep-0007")
    assert kept is not None and not kept.deleted and kept.cron == wanted[7].cron
    # Stored by an earlier release whose checks let it through (written here past them):
    # given unchanged, it is accepted as it stands, and nothing is written.
    assert provider.runtime is not None
    legacy = Schedule("dep-legacy", "dep-legacy", "61 * * * *", "UTC", True,
                      RunPayload("agent", "p"), 1)
    await provider.runtime.schedules.write("dep-legacy", lambda current: schedulecore
                                           .decide_apply(current, legacy, now=NOW, actor="old"))
    before = await last_seq(provider)
    await provider.reconcile([*wanted, legacy])
    assert await last_seq(provider) == before
    assert refused(provider) == {}
    await provider.reconcile([*wanted, Schedule(  # a change to it is checked
        "dep-legacy", "dep-legacy", "62 * * * *", "UTC", True, RunPayload("agent", "p"), 2)])
    assert refused(provider) == {"dep-legacy": "invalid"}
    assert await last_seq(provider) == before


async def test_capacity_refuses_the_last_new_enables_of_the_list(
    provider: NatsSchedulerProvider,
) -> None:
    """Past the capacity, the Schedules stored enabled keep their place and the new enables
    are taken in the list's order: the last ones are refused, the rest is written."""
    cap = provider.settings.max_active_schedules
    await provider.reconcile([schedule(i) for i in range(cap - 2)])
    before = await last_seq(provider)
    over = [schedule(i, prompt="changed", version=2) for i in range(cap + 1)]
    await provider.reconcile(over)
    assert refused(provider) == {over[-1].deployment_id: "capacity"}
    assert await last_seq(provider) == before + cap  # cap - 2 changed, 2 new
    assert provider.schedules.get(over[-1].deployment_id) is None
    assert provider.schedules.enabled_count() == cap
    # Disabling one makes room for the one refused, wherever it stands in the list.
    fits = [*over[1:], schedule(0, enabled=False, version=3)]
    await provider.reconcile(fits)
    assert refused(provider) == {}
    assert provider.schedules.enabled_count() == cap
async def test_a_planned_write_on_a_stale_copy_is_decided_again_on_the_stored_state(
    provider: NatsSchedulerProvider,
) -> None:
    """A writer that got there first (another replica's hold) makes the planned write lose
    its race; the change is decided again on the stored Schedule and keeps the hold."""
    table = ScheduleTable()  # a table no follower feeds: its copy goes stale
    other = ScheduleLog(provider.store, table)
    first = [schedule(i) for i in range(5)]
    await other.write_planned(
        schedulecore.plan_reconcile(first, table.get_with_seq, [], enabled=0, cap=10,
                                    now=NOW, actor="other").writes, redecide_apply(first))
    await provider.hold("dep-0001", by="ops", reason="incident")  # the other copy: stale
    wanted = [schedule(i, prompt="changed", version=2) for i in range(5)]
    planned = schedulecore.plan_reconcile(wanted, table.get_with_seq, [], enabled=5, cap=10,
                                          now=NOW, actor="other").writes
    assert len(planned) == 5
    await other.write_planned(planned, redecide_apply(wanted))
    for i in range(5):
        record = await stored(provider, f"dep-{i:04d}")
        assert record is not None and record.payload.prompt == "changed"
        assert (record.hold is not None) == (i == 1)


def redecide_apply(wanted: list[Schedule]) -> Callable[[schedulecore.PlannedWrite], Decide]:
    by_id = {s.deployment_id: s for s in wanted}

    def redecide(item: schedulecore.PlannedWrite) -> Decide:
        return lambda current: schedulecore.decide_apply(
            current, by_id[item.deployment_id], now=NOW, actor="other")

    return redecide


async def test_a_large_reconcile_hands_its_memory_back_also_with_refusals(
    provider: NatsSchedulerProvider, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reconcile of many Schedules ends by returning the freed memory of its temporaries to
    the system (a restart's reconcile of a million left ~45 MB resident unused), also when
    it refuses Schedules; a small one does not pay for it."""
    released: list[int] = []
    monkeypatch.setattr(schedule_changes, "RELEASE_AFTER_RECONCILE", 20)
    monkeypatch.setattr(schedule_changes, "release_freed_memory",
                        lambda: released.append(1) or True)
    await provider.reconcile([schedule(i) for i in range(19)])
    assert released == []
    await provider.reconcile([schedule(i) for i in range(20)])
    assert released == [1]
    bad = Schedule("dep-bad", "dep-bad", "61 * * * *", "UTC", True, RunPayload("a", "p"), 1)
    await provider.reconcile([*(schedule(i) for i in range(20)), bad])
    assert released == [1, 1]
    assert refused(provider) == {"dep-bad": "invalid"}


@given(stored=st.lists(st.tuples(st.integers(0, 12), st.booleans(), st.booleans(),
                                 st.integers(1, 3)), max_size=12),
       given_ids=st.lists(st.tuples(st.integers(0, 14), st.booleans(), st.integers(1, 3)),
                          max_size=14, unique_by=lambda t: t[0]))
@settings(max_examples=200, deadline=None)
def test_the_plan_with_the_tables_shortcuts_is_the_plan_without_them(
        stored: list[tuple[int, bool, bool, int]],
        given_ids: list[tuple[int, bool, int]]) -> None:
    """``plan_reconcile`` with the table's entries and live count (no tuple per Schedule,
    no walk of the live Schedules when every one was given) plans exactly what it plans on
    the bare reads, whatever is stored (deleted ones too) and whatever is given."""
    table = ScheduleTable()
    for seq, (i, enabled, deleted, version) in enumerate(stored, start=1):
        record = ScheduleRecord.of(schedule(i, enabled=enabled, version=version),
                                   updated_at=NOW, deleted=deleted)
        table.apply(seq, record)
    wanted = [schedule(i, enabled=enabled, version=version)
              for i, enabled, version in given_ids]
    common = dict(enabled=table.enabled_count(), cap=100, now=NOW, actor="a")
    bare = schedulecore.plan_reconcile(wanted, table.get_with_seq, table.live(), **common)
    fast = schedulecore.plan_reconcile(
        wanted, table.get_with_seq, table.live_records(), entry=table.entry,
        live_count=table.live_count(), given={s.deployment_id for s in wanted}, **common)
    assert fast == bare
    assert table.live_count() == len(table.live())


async def test_a_deployment_given_twice_is_refused_alone(
    provider: NatsSchedulerProvider,
) -> None:
    """Whether the list follows the table's order (walked beside it) or not (looked up), a
    deployment given twice is refused (none of its definitions written, its stored one
    kept, not deleted) and every other change is written."""
    await provider.reconcile([schedule(i) for i in range(30)])
    shapes: list[Callable[[list[Schedule]], list[Schedule]]] = [
        lambda c: [*c, c[4]],  # in the table's order, then one again
        lambda c: [c[4], *c],  # out of order from the start
        lambda c: [*c[:10], c[9], *c[10:]],  # side by side
    ]
    for round_, shape in enumerate(shapes):
        changed = [schedule(i, prompt=f"changed {round_}", version=2 + round_)
                   for i in range(30)]
        dep = "dep-0009" if round_ == 2 else "dep-0004"
        kept = await stored(provider, dep)
        before = await last_seq(provider)
        await provider.reconcile(shape(changed))
        assert refused(provider) == {dep: "duplicate"}
        assert provider.runtime is not None
        assert "2 times" in provider.runtime.refusals.listed()[0].reason
        assert await last_seq(provider) == before + 29
        assert await stored(provider, dep) == kept, "the stored one stays, not deleted"
        for i in range(30):
            record = await stored(provider, f"dep-{i:04d}")
            assert record is not None and not record.deleted
            if record.deployment_id != dep:
                assert record.payload.prompt == f"changed {round_}"


@given(stored=st.lists(st.tuples(st.integers(0, 12), st.booleans(), st.booleans(),
                                 st.integers(1, 3)), max_size=12),
       data=st.data())
@settings(max_examples=300, deadline=None)
def test_the_walk_in_the_tables_order_plans_what_lookups_plan(
        stored: list[tuple[int, bool, bool, int]], data: st.DataObject) -> None:
    """``plan_reconcile`` walking the table's order beside the list plans exactly what it
    plans looking every Schedule up, and refuses the same Schedules, for lists in the table's order
    with Schedules left out, added, repeated or moved, deleted ones stored among them; and a
    list entirely in the table's order costs no lookup and no set of its IDs."""
    table = ScheduleTable()
    for seq, (i, enabled, deleted, version) in enumerate(stored, start=1):
        table.apply(seq, ScheduleRecord.of(schedule(i, enabled=enabled, version=version),
                                           updated_at=NOW, deleted=deleted))
    ids = [int(e.record.deployment_id[4:]) for e in table.in_table_order()]
    kept = [i for i in ids if data.draw(st.booleans(), label=f"keep {i}")]
    for _ in range(data.draw(st.integers(0, 3), label="added or repeated")):
        kept.insert(data.draw(st.integers(0, len(kept)), label="at"),
                    data.draw(st.integers(0, 14), label="deployment"))
    if len(kept) > 1 and data.draw(st.booleans(), label="move one"):
        kept.insert(data.draw(st.integers(0, len(kept) - 1)), kept.pop(0))
    wanted = [schedule(i, enabled=data.draw(st.booleans()), version=data.draw(st.integers(1, 3)))
              for i in kept]
    common = dict(enabled=table.enabled_count(), cap=8, now=NOW, actor="a")
    looked_up: list[str] = []

    def entry(deployment_id: str) -> object:
        looked_up.append(deployment_id)
        return table.entry(deployment_id)

    def unique(listed: Sequence[Schedule]) -> set[str]:
        looked_up.append("a set of the IDs")
        return validation.deployment_ids(listed)

    bare = schedulecore.plan_reconcile(
        wanted, table.get_with_seq, table.live(), unique=validation.deployment_ids, **common)
    walked = schedulecore.plan_reconcile(
        wanted, table.get_with_seq, table.live_records(), entry=entry,  # type: ignore[arg-type]
        live_count=table.live_count(), ordered=table.in_table_order(), unique=unique,
        **common)
    assert walked == bare
    if kept == [i for i in ids if not table.get(f"dep-{i:04d}").deleted]:  # type: ignore[union-attr]
        assert looked_up == [], "a list in the table's order is walked, not looked up"


async def test_a_reconciles_messages_in_flight_stay_out_of_the_garbage_collector(
    provider: NatsSchedulerProvider,
) -> None:
    """The messages a reconcile keeps in flight for a round trip are untracked once the
    collector has seen them young: tracked ones reached the oldest generation by the
    thousand and set off a full collection for every ten thousand or so, each walking
    every Schedule of a million (a tuple holding a dict of headers is never untracked)."""
    table = ScheduleTable()
    log = ScheduleLog(provider.store, table)
    wanted = [schedule(i) for i in range(50)]
    planned = schedulecore.plan_reconcile(wanted, table.get_with_seq, [], enabled=0, cap=100,
                                          now=NOW, actor="a").writes
    chunks = list(log._chunks(planned))
    gc.collect(0)
    entries = [entry for chunk in chunks for entry in chunk]
    assert len(entries) == 50
    assert not [entry for entry in entries if gc.is_tracked(entry)]
    assert not [message for _, message in entries if gc.is_tracked(message)]


async def test_the_plan_a_reconcile_stores_is_not_walked_by_the_garbage_collector(
    provider: NatsSchedulerProvider, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A first load's plan (a million writes) is held for the minute it takes to store:
    once the collector has seen it young it no longer walks it at every full collection."""
    assert provider.runtime is not None
    schedules = provider.runtime.schedules
    seen: list[bool] = []
    real = schedules.write_planned

    async def write_planned(planned: Sequence[schedulecore.PlannedWrite],
                            redecide: Callable[[schedulecore.PlannedWrite], Decide]) -> None:
        gc.collect(0)
        seen.append(gc.is_tracked(planned) and len(planned) > 0)
        await real(planned, redecide)

    monkeypatch.setattr(schedules, "write_planned", write_planned)
    await provider.reconcile([schedule(i) for i in range(40)])
    assert seen == [False]
    assert await last_seq(provider) == 40

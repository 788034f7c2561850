"""Checkpoints of the Schedule table, on a real server (docs/architecture.md, "Start-up and
readiness, and the Schedule table").

A replica that starts after a checkpoint was written loads it and then follows only the
Schedule events after it; what it holds must be exactly what the store holds (every
Schedule subject's last event, with its sequence), whatever happened after the checkpoint:
changes, holds, deletions, new Schedules. A checkpoint that cannot be loaded whole makes
the replica replay every Schedule, as before, with the same result. Of two replicas writing
at once one checkpoint wins and the other's parts are gone.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from nats_scheduler.admin.reader import last_per_subject
from nats_scheduler.clock import ManualClock
from nats_scheduler.core.events import decode_schedule_event
from nats_scheduler.jetstream import checkpoints as jetstream_checkpoints
from nats_scheduler.jetstream.checkpoints import Checkpoints
from nats_scheduler.ports.checkpoints import CheckpointRow
from nats_scheduler.projections.schedule_table import ScheduleTable
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.runtime.checkpointing import BEHIND_SHARE, Checkpointing
from nats_scheduler.seam import RunPayload, Schedule
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import running

pytestmark = pytest.mark.anyio

COUNT = 300
NOW = datetime(2030, 1, 1, tzinfo=UTC)


def schedule(i: int, *, prompt: str = "p", version: int = 1) -> Schedule:
    dep = f"ckpt-{i:04d}"
    name = dep if i % 3 else f"named {i}"  # most names equal the ID: stored once
    return Schedule(dep, name, f"{i % 60} {i % 24} * * *", "Europe/Paris", True,
                    RunPayload("agent", f"{prompt} {i}"), version)


async def stored(nats_url: str, prefix: str) -> dict[str, tuple[int, dict[str, object]]]:
    """Every Schedule subject's last event as the store has it: deployment -> (sequence,
    record as builtins)."""
    nc = await connect_fast(nats_url)
    try:
        found = await last_per_subject(nc, f"{prefix}_SCHEDULES", f"{prefix}.sched.*")
    finally:
        await nc.close()
    out = {}
    for message in found:
        record = decode_schedule_event(message.data).schedule
        out[record.deployment_id] = (message.seq, msgspec.to_builtins(record))
    return out


async def subjects(nats_url: str, prefix: str) -> dict[str, int]:
    """The checkpoints stream's subjects and how many messages each holds."""
    nc = await connect_fast(nats_url)
    try:
        info = await nc.jetstream().stream_info(f"{prefix}_CHECKPOINTS", subjects_filter=">")
    finally:
        await nc.close()
    return dict(info.state.subjects or {})


def held(provider: NatsSchedulerProvider) -> dict[str, tuple[int, dict[str, object]]]:
    """The provider's Schedule table, as :func:`stored`."""
    return {entry.record.deployment_id: (entry.seq, msgspec.to_builtins(entry.record))
            for entry in provider.schedules.entries()}


async def test_a_replica_starts_from_the_checkpoint_and_the_events_after_it(
    nats_url: str,
) -> None:
    prefix = unique_prefix()
    async with running(nats_url, prefix, max_active_schedules=COUNT + 10) as writer:
        await writer.reconcile([schedule(i) for i in range(COUNT)])
        assert writer.runtime is not None
        checkpointing = writer.runtime.checkpointing
        assert checkpointing.enabled, "the store keeps checkpoints"
        assert await checkpointing.write_if_due(min_schedules=1)
        assert not await checkpointing.write_if_due(min_schedules=1), "nothing changed"
        # after the checkpoint: changed, held, deleted, new
        await writer.reconcile([schedule(i, prompt="changed", version=2) if i < 10
                                else schedule(i) for i in range(5, COUNT + 3)])
        await writer.hold("ckpt-0100", by="ops", reason="incident")
        assert await stored(nats_url, prefix) == held(writer)

    async with running(nats_url, prefix, max_active_schedules=COUNT + 10) as starting:
        await starting.until_ready()
        assert starting.runtime is not None
        assert starting.runtime.checkpointing.loaded == COUNT
        assert held(starting) == await stored(nats_url, prefix)
        assert starting.ticker is not None and starting.ticker.planned == COUNT + 3 - 5 - 1
        # its table is proven current at once (a reconcile decides on it, writing nothing
        # for the unchanged), and it goes on following the events as any replica
        before = await starting.store.last_seq(f"{prefix}_SCHEDULES")
        assert await starting.runtime.freshness.confirm() is not None
        await starting.reconcile([*(s.definition() for s in starting.schedules.live()),
                                  schedule(COUNT + 5)])
        assert await starting.store.last_seq(f"{prefix}_SCHEDULES") == before + 1
        assert held(starting) == await stored(nats_url, prefix)
        latest = await Checkpoints(starting.store).latest()
        assert latest is not None
        assert await starting.runtime.checkpointing.write(previous=latest[0])

    # nothing stored after the newest checkpoint: the table is current all the same
    async with running(nats_url, prefix, max_active_schedules=COUNT + 10) as restarted:
        await restarted.until_ready()
        assert restarted.runtime is not None
        assert restarted.runtime.checkpointing.loaded == COUNT + 4  # deleted ones too
        assert await restarted.runtime.freshness.confirm() is not None
        before = await restarted.store.last_seq(f"{prefix}_SCHEDULES")
        await restarted.reconcile([s.definition() for s in restarted.schedules.live()])
        assert await restarted.store.last_seq(f"{prefix}_SCHEDULES") == before
        assert held(restarted) == await stored(nats_url, prefix)


async def test_a_checkpoint_that_cannot_be_loaded_whole_means_the_replay(
    nats_url: str,
) -> None:
    prefix = unique_prefix()
    async with running(nats_url, prefix, max_active_schedules=COUNT + 10) as writer:
        await writer.reconcile([schedule(i) for i in range(COUNT)])
        assert writer.runtime is not None
        assert await writer.runtime.checkpointing.write_if_due(min_schedules=1)
        latest = await Checkpoints(writer.store).latest()
        assert latest is not None
        head = latest[1]
        nc = await connect_fast(nats_url)
        try:  # a part lost: the stream's max age, an operator's purge
            js = nc.jetstream()
            first = await js.get_msg(f"{prefix}_CHECKPOINTS", seq=1,
                                     subject=f"{prefix}.checkpoint.part.{head.id}", next=True)
            await js.purge_stream(f"{prefix}_CHECKPOINTS", seq=first.seq + 1,
                                  subject=f"{prefix}.checkpoint.part.{head.id}")
        finally:
            await nc.close()
        await writer.apply(schedule(COUNT + 1))

    async with running(nats_url, prefix, max_active_schedules=COUNT + 10) as starting:
        await starting.until_ready()
        assert starting.runtime is not None
        assert starting.runtime.checkpointing.loaded is None
        assert held(starting) == await stored(nats_url, prefix)


async def test_of_two_replicas_writing_at_once_one_checkpoint_stands(nats_url: str) -> None:
    prefix = unique_prefix()
    async with running(nats_url, prefix, max_active_schedules=COUNT + 10) as a, \
            running(nats_url, prefix, max_active_schedules=COUNT + 10) as b:
        await a.reconcile([schedule(i) for i in range(COUNT)])
        await b.until_ready()
        assert a.runtime is not None and b.runtime is not None
        # both read the same newest head (none) and write: one head wins
        results = [await a.runtime.checkpointing.write(previous=0),
                   await b.runtime.checkpointing.write(previous=0)]
        assert results == [True, False]
        latest = await Checkpoints(a.store).latest()
        assert latest is not None and latest[1].by == a.identity
        assert set(await subjects(nats_url, prefix)) == {
            f"{prefix}.checkpoint.head", f"{prefix}.checkpoint.part.{latest[1].id}"}
        # more than a tenth of the Schedules changed since: due again, and the older
        # checkpoint's parts and head are purged
        await a.reconcile([schedule(i, prompt="changed", version=2)
                           if i <= COUNT // BEHIND_SHARE else schedule(i)
                           for i in range(COUNT)])
        assert await a.runtime.checkpointing.write_if_due(min_schedules=1)
        newest = await Checkpoints(a.store).latest()
        assert newest is not None and newest[1].id != latest[1].id
        now_held = await subjects(nats_url, prefix)
        assert set(now_held) == {f"{prefix}.checkpoint.head",
                                 f"{prefix}.checkpoint.part.{newest[1].id}"}
        assert now_held[f"{prefix}.checkpoint.head"] == 1


async def test_the_checkpoint_loop_waits_on_any_clock_the_provider_takes() -> None:
    """The loop waits with ``sleep_for``: a ManualClock (tests, benches, an embedding host)
    has no ``sleep`` of its own, and the loop's task died with AttributeError on it."""
    clock = ManualClock(datetime(2031, 1, 1, tzinfo=UTC))
    looks: list[str] = []

    def owns(job: str) -> bool:
        looks.append(job)
        return False

    loop = Checkpointing(None, ScheduleTable(), position=lambda: 0, ready=lambda: True,
                         owns=owns, clock=clock, identity="x")
    task = asyncio.create_task(loop.forever(interval=60.0))
    try:
        for _ in range(3):
            await asyncio.sleep(0.01)
            clock.advance(61.0)
        await asyncio.sleep(0.01)
        assert not task.done(), task.exception() if task.done() else None
    finally:
        task.cancel()


class _Interleaving:
    """The provider's store, with other messages of the checkpoints stream stored between a
    checkpoint's parts (another writer's parts), as many after each part as ``gaps`` says."""

    def __init__(self, store: Any, gaps: list[int]) -> None:
        self._store, self._gaps, self._parts = store, gaps, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def publish(self, subject: str, data: bytes, *, msg_id: str) -> int:
        seq = await self._store.publish(subject, data, msg_id=msg_id)
        for extra in range(self._gaps[self._parts % len(self._gaps)]):
            await self._store.publish(f"{self._store.names.checkpoint_parts_subject('other')}",
                                      b"x", msg_id=f"{msg_id}-other-{extra}")
        self._parts += 1
        return seq


@pytest.mark.parametrize("gaps", [[0], [1], [0, 0, 3, 0, 1, 0, 0, 0, 2, 5, 0], [0] * 9 + [7]])
async def test_every_part_is_read_back_in_order_whatever_is_stored_between_them(
    nats_url: str, monkeypatch: pytest.MonkeyPatch, gaps: list[int],
) -> None:
    """Parts are asked for ahead, from guessed sequences; whatever other messages lie
    between them, the rows read back are every row written, in order, once each."""
    monkeypatch.setattr(jetstream_checkpoints, "PART_ROWS", 7)  # 43 parts for 300
    prefix = unique_prefix()
    async with running(nats_url, prefix, max_active_schedules=COUNT + 10) as writer:
        await writer.reconcile([schedule(i) for i in range(COUNT)])
        entries = writer.schedules.entries()
        store = _Interleaving(writer.store, gaps)
        head = await Checkpoints(store).write(  # type: ignore[arg-type]
            entries, schedules_seq=COUNT, schedules_created="c", previous=0, by="test",
            now=NOW)
        assert head is not None and head.parts == -(-COUNT // 7)
        read: list[CheckpointRow] = []
        async for rows in Checkpoints(writer.store).rows(head):
            read.extend(rows)
        assert read == [CheckpointRow.of(e.seq, e.record) for e in entries]
        assert not [t for t in asyncio.all_tasks() if "Store.next" in repr(t.get_coro())]

"""Schedule writes decided first on the table's copy, on a real server.

``ScheduleLog.write`` saves the leader read when this process's copy is current, so each
test gives a second log its own table that no follower feeds: its copy goes stale exactly
when the test changes the Schedule through the provider, and every change made on a stale
copy must still end as if it had been decided on the leader's state.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

import pytest

from nats_scheduler.core import schedulecore
from nats_scheduler.core.events import ScheduleEventType, ScheduleRecord
from nats_scheduler.jetstream.schedulelog import ScheduleLog
from nats_scheduler.jetstream.store import StoredMessage
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.projections.schedule_table import ScheduleTable
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.seam import RunPayload, Schedule, ScheduleNotFound
from tests.harness.servers import unique_prefix
from tests.providers import running

pytestmark = pytest.mark.anyio

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def definition(prompt: str, enabled: bool = True) -> Schedule:
    return Schedule("dep", "dep", "0 3 * * *", "UTC", enabled, RunPayload("agent", prompt), 0)


def applying(schedule: Schedule, seen: list[ScheduleRecord | None]) -> Callable[
        [ScheduleRecord | None], ScheduleEventType | None]:
    """``decide_apply`` of ``schedule``, noting every state it was asked to decide on."""
    def decide(current: ScheduleRecord | None) -> ScheduleEventType | None:
        seen.append(current)
        return schedulecore.decide_apply(current, schedule, now=NOW, actor="other")
    return decide


@pytest.fixture
async def provider(nats_server: NatsServer) -> AsyncIterator[NatsSchedulerProvider]:
    async with running(nats_server.url, unique_prefix()) as started:
        await started.until_ready()  # its start-up reads (checkpoint, table) are done
        yield started


@pytest.fixture
def other(provider: NatsSchedulerProvider) -> ScheduleLog:
    """A second writer on the same store whose table only its own reads and writes feed."""
    return ScheduleLog(provider.store, ScheduleTable())


async def leader(provider: NatsSchedulerProvider) -> ScheduleRecord:
    """The Schedule as the stream leader has it."""
    assert provider.runtime is not None
    record = await provider.runtime.schedules.read("dep")
    assert record is not None
    return record


def count_reads(provider: NatsSchedulerProvider, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The subjects the store reads the last message of, from now on."""
    reads: list[str] = []
    original: Callable[..., Awaitable[StoredMessage | None]] = provider.store.last

    async def last(subject: str, stream: str | None = None) -> StoredMessage | None:
        reads.append(subject)
        return await original(subject, stream)

    monkeypatch.setattr(provider.store, "last", last)
    return reads


async def test_a_current_copy_changes_the_schedule_without_a_read(
    provider: NatsSchedulerProvider, other: ScheduleLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    await other.write("dep", applying(definition("first"), []))
    reads = count_reads(provider, monkeypatch)
    stored = await other.write("dep", applying(definition("second"), []))
    assert stored is not None and stored.payload.prompt == "second"
    assert reads == []
    assert (await leader(provider)).payload.prompt == "second"


async def test_a_stale_copy_loses_the_append_and_keeps_an_operator_hold(
    provider: NatsSchedulerProvider, other: ScheduleLog
) -> None:
    await other.write("dep", applying(definition("first"), []))
    await provider.hold("dep", by="ops", reason="incident")  # the other copy does not know
    seen: list[ScheduleRecord | None] = []
    stored = await other.write("dep", applying(definition("second"), seen))
    assert [s.hold is not None for s in seen if s is not None] == [False, True]
    assert stored is not None and stored.hold is not None and stored.payload.prompt == "second"
    stored = await leader(provider)
    assert stored.hold is not None and stored.payload.prompt == "second"


async def test_nothing_to_write_on_a_stale_copy_is_confirmed_on_the_leader(
    provider: NatsSchedulerProvider, other: ScheduleLog
) -> None:
    await other.write("dep", applying(definition("first"), []))
    await provider.apply(definition("changed elsewhere"))
    # By the stale copy, applying "first" again is a no-op; by the leader it is a change.
    stored = await other.write("dep", applying(definition("first"), []))
    assert stored is not None and stored.payload.prompt == "first"
    assert (await leader(provider)).payload.prompt == "first"


async def test_a_refusal_on_a_stale_copy_is_confirmed_on_the_leader(
    provider: NatsSchedulerProvider, other: ScheduleLog
) -> None:
    def hold(current: ScheduleRecord | None) -> ScheduleEventType | None:
        if current is None or current.deleted:
            raise ScheduleNotFound("dep")
        return schedulecore.decide_hold(current, by="ops", reason="r", now=NOW, actor="other")

    await other.write("dep", applying(definition("first"), []))
    await other.write("dep", lambda c: schedulecore.decide_delete(c, now=NOW, actor="other"))
    await provider.apply(definition("back"))  # the other copy still says deleted
    held = await other.write("dep", hold)
    assert held is not None and held.hold is not None and held.payload.prompt == "back"
    await provider.delete("dep")
    await other.read("dep")
    with pytest.raises(ScheduleNotFound):  # deleted on the leader too: refused
        await other.write("dep", hold)

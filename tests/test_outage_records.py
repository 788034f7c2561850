"""The outage records on a real server: one write per outage, none while a replica runs.

A replica that starts after every other one stopped appends one ``outage.recorded``, from
the last sign of life the store holds (the last replica's leave) to its own start, on the
store's clock; a replica that starts beside a running one records nothing; two replicas
starting together after an outage record it once.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from nats_scheduler import NatsSchedulerProvider
from nats_scheduler.clock import ManualClock
from nats_scheduler.core.events import OutageRecorded
from nats_scheduler.jetstream.outages import OutageLog, Recorded
from nats_scheduler.runtime.outage_watch import SETTLE_SECONDS
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import MongoBackend, running, settings

pytestmark = pytest.mark.anyio

WAIT = SETTLE_SECONDS + 10.0
"""How long a test waits for a record (or its absence) after a start."""


async def records(url: str, prefix: str) -> list[Recorded]:
    nc = await connect_fast(url)
    try:
        from nats_scheduler.jetstream.store import Store
        store = Store(nc, settings(url, prefix))
        return await OutageLog(store).records()
    finally:
        await nc.close()


async def settled(provider: NatsSchedulerProvider) -> None:
    """Until the start's outage decision is made (recorded or not)."""
    runtime = provider.runtime
    assert runtime is not None
    await asyncio.wait_for(runtime.outages.decided.wait(), WAIT)


@pytest.mark.wall_clock
async def test_a_start_after_every_replica_stopped_records_the_outage_once(
        nats_url: str) -> None:
    prefix = unique_prefix()
    async with running(nats_url, prefix, identity="first") as first:
        await settled(first)
    assert await records(nats_url, prefix) == []  # a new store: nothing ran before
    async with running(nats_url, prefix, identity="second") as second:
        await settled(second)
        began = second.runtime.began  # type: ignore[union-attr]
        async with running(nats_url, prefix, identity="beside") as beside:
            await settled(beside)  # started while "second" runs: no outage
    found = await records(nats_url, prefix)
    assert len(found) == 1
    event = found[0].event
    assert isinstance(event, OutageRecorded)
    # its start on the store's clock (the estimate's upper bound, read again after the settle)
    assert event.actor == "second"
    assert abs(event.end - began) <= timedelta(seconds=0.05)
    assert event.start < event.end
    assert "replica" in event.evidence  # the first replica's leave is the newest sign of life
    assert found[0].stored_at >= began + timedelta(seconds=SETTLE_SECONDS)


@pytest.mark.wall_clock
async def test_replicas_starting_together_after_an_outage_record_it_once(nats_url: str) -> None:
    prefix = unique_prefix()
    async with running(nats_url, prefix, identity="before") as before:
        await settled(before)
    async with running(nats_url, prefix, identity="a") as a, \
            running(nats_url, prefix, identity="b") as b:
        await asyncio.gather(settled(a), settled(b))
        recorded = [p.runtime.outages.recorded for p in (a, b)]  # type: ignore[union-attr]
    found = await records(nats_url, prefix)
    assert len(found) == 1, found
    assert sum(r is not None for r in recorded) == 1


async def test_a_replica_on_a_hand_moved_clock_records_nothing(nats_url: str) -> None:
    prefix = unique_prefix()
    async with running(nats_url, prefix, identity="first"):
        pass
    provider = NatsSchedulerProvider(settings(nats_url, prefix, identity="manual"),
                                     clock=ManualClock())
    provider.configure(repository_backend=MongoBackend())
    from nats_scheduler.testing.handler import RecordingRunHandler
    await provider.start(RecordingRunHandler())
    try:
        await provider.runtime.until_ready()  # type: ignore[union-attr]
    finally:
        await provider.stop()
    assert await records(nats_url, prefix) == []


@pytest.mark.wall_clock
async def test_a_start_whose_first_requests_go_unanswered_still_records_the_outage(
        nats_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A replica busy loading a million Schedules when it joins saw its first requests time
    out (bench/scale.py): the stream's creation and the record are asked again, and the
    record is stored once (a lost answer of a stored record is read back, not doubled)."""
    from nats_scheduler.runtime import outage_watch

    monkeypatch.setattr(outage_watch, "BACKOFF_SECONDS", 0.05)
    unanswered = {"ensure": 2, "append": 1}
    real_ensure, real_append = OutageLog.ensure, OutageLog.append

    async def ensure(self: OutageLog, *, warn: bool = True) -> bool:
        if unanswered["ensure"]:
            unanswered["ensure"] -= 1
            return False
        return await real_ensure(self, warn=warn)

    async def append(self: OutageLog, *args: object, **kwargs: object) -> object:
        if unanswered["append"]:
            unanswered["append"] -= 1
            raise TimeoutError
        return await real_append(self, *args, **kwargs)  # type: ignore[arg-type]

    prefix = unique_prefix()
    async with running(nats_url, prefix, identity="first") as first:
        await settled(first)
    monkeypatch.setattr(OutageLog, "ensure", ensure)
    monkeypatch.setattr(OutageLog, "append", append)
    async with running(nats_url, prefix, identity="second") as second:
        await settled(second)
    assert unanswered == {"ensure": 0, "append": 0}
    found = await records(nats_url, prefix)
    assert [r.event.actor for r in found] == ["second"]


async def test_a_stream_of_an_earlier_release_is_brought_to_the_wildcard_keeping_its_records(
        nats_url: str) -> None:
    """Earlier releases created the outage stream on its one literal subject, to which a
    consumer of anybody allowed to create one could deliver; a start brings it to the
    wildcard (docs/operations.md, "Upgrades"), and the records stay readable."""
    import dataclasses
    from datetime import UTC, datetime

    from nats_scheduler.core.events import encode
    from nats_scheduler.jetstream.outages import stream_config
    from nats_scheduler.jetstream.store import Store
    from nats_scheduler.names import Names

    prefix = unique_prefix()
    names = Names(prefix)
    nc = await connect_fast(nats_url)
    try:
        js = nc.jetstream()
        old = dataclasses.replace(stream_config(names, settings(nats_url, prefix)),
                                  subjects=[names.outage_subject])
        await js.add_stream(old)
        start = datetime(2026, 1, 1, tzinfo=UTC)
        event = OutageRecorded(at=start, actor="old", start=start,
                               end=start + timedelta(hours=1), evidence="replicas")
        await js.publish(names.outage_subject, encode(event))
        log = OutageLog(Store(nc, settings(nats_url, prefix)))
        assert await log.ensure()
        info = await js.stream_info(names.outages_stream)
        assert info.config.subjects == [names.outages_filter]
        assert [r.event for r in await log.records()] == [event]
    finally:
        await nc.close()

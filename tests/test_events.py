"""Stored events: readable JSON with a schema version and a stable type tag, forever decodable."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nats_scheduler.core import events
from nats_scheduler.jetstream.event_feed import in_order
from nats_scheduler.seam import EnqueueRequest, RunPayload, RunState, Schedule, Trigger
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import eventually, running

FIXTURES = sorted((Path(__file__).parent / "fixtures" / "events").glob("v*/*.json"))
RUN_TAGS = {"run.created", "run.claimed", "run.session_started", "run.attempt_failed",
            "run.dispatched", "run.failed", "run.released"}
SCHEDULE_TAGS = {"schedule.applied", "schedule.deleted", "schedule.held", "schedule.released"}
OUTAGE_TAGS = {"outage.recorded"}


def test_a_fixture_exists_for_every_event_type() -> None:
    tags = {json.loads(p.read_text())["type"] for p in FIXTURES}
    assert tags == RUN_TAGS | SCHEDULE_TAGS | OUTAGE_TAGS


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_stored_event_version_still_decodes(path: Path) -> None:
    raw = path.read_bytes()
    event = events.decode_event(raw)
    data = json.loads(raw)
    assert event.schema == data["schema"] >= 1
    assert type(event).__struct_config__.tag == data["type"]
    # re-encoding is lossless for the fields we know; fields added since (additive evolution)
    # come back at their default, null
    assert without_added(json.loads(events.encode(event)), data) == data


def without_added(encoded: object, stored: object) -> object:
    """``encoded`` less the null fields that ``stored`` (an older version) does not have."""
    if isinstance(encoded, dict) and isinstance(stored, dict):
        return {k: without_added(v, stored.get(k)) for k, v in encoded.items()
                if k in stored or v is not None}
    return encoded


def test_unknown_fields_from_a_newer_writer_are_ignored() -> None:
    data = json.loads(FIXTURES[0].read_text())
    data["added_in_v2"] = {"anything": [1, 2]}
    data.setdefault("run", data.get("schedule", {}))["another_new_field"] = "x"
    events.decode_event(json.dumps(data).encode())


def test_tags_are_explicit_not_class_names() -> None:
    assert events.RunCreated.__struct_config__.tag == "run.created"
    assert events.ScheduleHeld.__struct_config__.tag == "schedule.held"


@pytest.mark.anyio
async def test_live_events_are_json_with_schema_and_type(nats_url: str) -> None:
    prefix = unique_prefix()
    async with running(nats_url, prefix) as provider:
        await provider.apply(Schedule("live", "Live", "0 3 1 1 *", "UTC", True,
                                      RunPayload("t", "p"), 1))
        await provider.fire_due("live", datetime(2031, 1, 1, 3, tzinfo=UTC))
        run = await provider.enqueue(EnqueueRequest("live", Trigger.RUN_NOW, requested_by="bob"))

        async def dispatched() -> bool:
            return (await provider.get_run(run.run_id)).state == RunState.DISPATCHED

        await eventually(dispatched)
    nc = await connect_fast(nats_url)
    try:
        js = nc.jetstream()
        seen: set[str] = set()
        for stream, subject in ((f"{prefix}_RUNS", f"{prefix}.run.>"),
                                (f"{prefix}_SCHEDULES", f"{prefix}.sched.>")):
            sub = await js.pull_subscribe(subject, stream=stream)
            msgs = await sub.fetch(100, timeout=2)
            for msg in msgs:
                data = json.loads(msg.data)
                assert data["schema"] == events.SCHEMA_VERSION and isinstance(data["type"], str)
                assert "at" in data and "actor" in data
                seen.add(data["type"])
            await sub.unsubscribe()
        assert {"run.created", "run.claimed", "run.session_started", "run.dispatched",
                "schedule.applied"} <= seen
    finally:
        await nc.close()


def test_a_feed_keeps_each_stream_in_its_order_and_merges_streams_by_time() -> None:
    """Events of one stream come back in the order they were stored, even when a later one
    carries an earlier time (written by another process, whose estimate of the store's
    clock differs by a few milliseconds: a hold listed before the apply it followed, seen
    in the admin service's test under load); events of different streams are merged by
    their times."""
    t0 = datetime(2031, 7, 1, 10, 0, tzinfo=UTC)
    record = events.ScheduleRecord(deployment_id="d", name="d", cron="* * * * *",
                                   timezone="UTC", enabled=True,
                                   payload=RunPayload("t", "p"), updated_at=t0)

    def applied(ms: int) -> events.ScheduleApplied:
        return events.ScheduleApplied(at=t0 + timedelta(milliseconds=ms), actor="a",
                                      schedule=record)

    def held(ms: int) -> events.ScheduleHeld:
        return events.ScheduleHeld(at=t0 + timedelta(milliseconds=ms), actor="b",
                                   schedule=record, by="op", reason="why")

    first, hold, second = applied(10), held(8), applied(30)  # the hold stamped 2 ms early
    other_early, other_late = applied(5), applied(20)  # another stream
    buffered = [(0, 3, second), (1, 7, other_late), (0, 1, first), (0, 2, hold),
                (1, 6, other_early)]
    assert in_order(buffered) == [other_early, first, hold, other_late, second]

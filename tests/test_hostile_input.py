"""Hostile input: everything either works or is refused with the seam's error, and nothing is
half-written.

* cron and time-zone strings from hypothesis go through ``provider.apply`` against a real
  server (the provider runs in an anyio blocking portal, so hypothesis drives plain sync
  tests): each is stored and computable, or ``InvalidSchedule`` with a clean message and no
  event stored;
* deployment IDs, names, prompts and targets with subject tokens, control characters,
  very long strings and lone surrogates; operator notes (who, why) likewise;
* payloads larger than the server's max payload (a server with ``max_payload: 64KB``):
  refused before anything is written, while the largest accepted one still carries every
  later event of its Runs (hold, Run now with notes, dispatch).

"Nothing half-written" is checked against the store itself: every Schedule subject's last
event is the provider's Schedule, every Run subject's last event is in the Run ledger, and
a refused call leaves the stream's message count unchanged.
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import available_timezones

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from nats_scheduler import NatsSchedulerProvider
from nats_scheduler.core.events import decode_run_event, decode_schedule_event
from nats_scheduler.jetstream.store_reads import last_per_subject
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.seam import (
    EnqueueRequest,
    InvalidSchedule,
    RunPayload,
    RunState,
    Schedule,
    Trigger,
)
from tests.harness.servers import unique_prefix
from tests.providers import assert_clean, eventually, running

COMMON = settings(deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
DUE = datetime(2031, 1, 1, 3, 0, tzinfo=UTC)
IDS = itertools.count()


def check_message(message: str) -> None:
    """Clean (docs/contract.md), printable and bounded; what the caller sent may be quoted."""
    assert message and len(message) < 2000, message
    assert all(unicodedata.category(c) not in ("Cc", "Cs") for c in message), repr(message)
    assert_clean(re.sub(r"'[^']*'|\"[^\"]*\"", "''", message))


def schedule(dep: str, **fields: object) -> Schedule:
    values: dict[str, object] = {"name": "hostile", "cron": "0 3 1 1 *", "timezone": "UTC",
                                 "target": "agent://t", "prompt": "p"}
    values.update(fields)
    return Schedule(dep, str(values["name"]), str(values["cron"]), str(values["timezone"]),
                    True, RunPayload(str(values["target"]), str(values["prompt"])), 1)


async def settled(provider: NatsSchedulerProvider) -> None:
    """Wait until every Run is DISPATCHED or FAILED: no event is on its way any more."""
    await eventually(lambda: not list(provider.ledger.unfinished()), timeout=10)


async def event_count(provider: NatsSchedulerProvider) -> tuple[int, int]:
    """(Schedule events, Run events) stored, once every Run has settled."""
    await settled(provider)
    js, names = provider.store.js, provider.store.names
    return ((await js.stream_info(names.schedules_stream)).state.messages,
            (await js.stream_info(names.runs_stream)).state.messages)


async def assert_consistent(provider: NatsSchedulerProvider) -> None:
    """Every stored Schedule and Run is what the provider answers with: no half-writes."""
    await settled(provider)
    nc, names = provider.store.nc, provider.store.names
    for item in await last_per_subject(nc, names.schedules_stream, names.schedules_filter):
        stored = decode_schedule_event(item.data).schedule
        assert provider.schedules.get(stored.deployment_id) == stored
    for item in await last_per_subject(nc, names.runs_stream, names.runs_filter):
        stored = decode_run_event(item.data).run

        async def in_ledger(run=stored) -> bool:  # type: ignore[no-untyped-def]
            return provider.ledger.get(run.run_id) == run

        await eventually(in_ledger, timeout=5)
        assert await provider.get_run(stored.run_id) == stored.to_run()
        listed = await provider.list_runs(stored.deployment_id, limit=1000)
        assert stored.run_id in {r.run_id for r in listed}


# =========================================================================== fuzzed cron/zones


@pytest.fixture(scope="module")
def fuzz(nats_server: NatsServer) -> Iterator[tuple[BlockingPortal, NatsSchedulerProvider]]:
    """A provider in a blocking portal's event loop, for sync hypothesis tests."""
    with start_blocking_portal(backend="asyncio") as portal, \
            portal.wrap_async_context_manager(running(nats_server.url, unique_prefix())) as p:
        yield portal, p
        portal.call(assert_consistent, p)


FIELD_TOKENS = st.sampled_from([
    "*", "*/5", "*/0", "0", "5", "59", "60", "99999999", "1-5", "5-1", "1-5/2", "5/10", "L",
    "5L", "15W", "LW", "#", "?", "H", "MON", "mon-fri", "SUN,SAT", "JAN", "jan-dec/3", "-1",
    "1,", ",1", "", "7", "0-7", "a", "\x00", "\ud800", "１", "٣",
])
VALID_FIELDS = [
    st.sampled_from(["*", "*/5", "0", "59", "0-30/5", "1,15,30"]),
    st.sampled_from(["*", "3", "*/2", "0-23", "2-3"]),
    st.sampled_from(["*", "1", "29", "31", "1-15", "*/10"]),
    st.sampled_from(["*", "JAN", "1-12/3", "feb", "2", "dec"]),
    st.sampled_from(["*", "MON-FRI", "0", "7", "sun,sat", "1-5"]),
]
crons = st.one_of(
    st.tuples(*VALID_FIELDS).map(" ".join),
    st.tuples(*VALID_FIELDS).map(" ".join),
    st.lists(FIELD_TOKENS, min_size=1, max_size=7).map(" ".join),
    st.sampled_from(["@daily", "@hourly", "@weekly", "@reboot", "@every 5m", "@yearly",
                     "* * * * * *", "0 0 * * * *", "0 3 1 1 *", "* * * * *"]),
    st.text(max_size=40),
    st.text(alphabet="0123456789*/-, LWH#?@JANMONsun\t\n", max_size=30),
    st.text(min_size=300, max_size=2000, alphabet="0123456789*/-, "),
)
ZONES = sorted(available_timezones())
KNOWN = ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham",
         "Asia/Kolkata", "America/Santiago", "Pacific/Apia", "Antarctica/Troll", "Etc/GMT-14",
         "America/St_Johns", "Asia/Kathmandu"]
"""Accepted zones come from a few interesting ones: each new zone costs the calendar its
transition table (~0.1 s), and the calendar's own property tests cover the DST rules."""
zones = st.one_of(
    st.sampled_from(KNOWN),
    st.sampled_from(KNOWN),
    st.sampled_from(ZONES).map(str.lower).filter(lambda z: z not in ZONES),
    st.sampled_from(ZONES).map(lambda z: z + " "),
    st.sampled_from(["", "UTC ", " UTC", "utc", "Local", "localtime", "../../etc/passwd",
                     "/usr/share/zoneinfo/UTC", "Europe/Berlin\x00", "Europe/../UTC",
                     "Etc/GMT+14", "Etc/GMT+15", "EST5EDT", "posix/Europe/Berlin",
                     "right/UTC", "Europe/Berlin" * 40, "\ud800"]),
    st.text(max_size=30),
)


@settings(COMMON, max_examples=200)
@given(cron=crons, timezone=zones)
def test_fuzzed_cron_and_time_zone_work_or_are_refused(
    fuzz: tuple[BlockingPortal, NatsSchedulerProvider], cron: str, timezone: str
) -> None:
    portal, provider = fuzz
    dep = f"fuzz-{next(IDS)}"
    before = portal.call(event_count, provider)
    try:
        portal.call(provider.apply, schedule(dep, cron=cron, timezone=timezone))
    except InvalidSchedule as error:
        event("refused")
        check_message(str(error))
        assert portal.call(event_count, provider) == before
        assert provider.schedules.get(dep) is None
        return
    event("accepted")
    record = provider.schedules.get(dep)
    assert record is not None and (record.cron, record.timezone) == (cron, timezone)
    assert portal.call(event_count, provider) == (before[0] + 1, before[1])
    provider.next_due(dep, DUE)  # whatever is stored can be computed


# =========================================================================== hostile strings

SUBJECT_TOKENS = ["a.b", "*", ">", "a.>", "$JS.API.STREAM.DELETE.SCHED_RUNS", "_INBOX.x.y",
                  "a b\tc", "%2E", "SCHED.run.x.y"]
CONTROL = ["nul\x00in", "\x1b[31mred\x1b[0m", "line\r\nbreak", "\x7f\x08\x07", "\u202eevil",
           "\ufeffbom", "\u2028sep"]
LONG = ["x" * 255, "é" * 255, "🙂" * 255, "x" * 256, "y" * 100_000]
SURROGATES = ["\ud800", "a\udfffb", "\udc80\udc80"]
HOSTILE = SUBJECT_TOKENS + CONTROL + LONG + SURROGATES


def refused_id(value: str) -> bool:
    return len(value) > 255 or any("\ud800" <= c <= "\udfff" for c in value)


def refused_text(value: str) -> bool:
    return any("\ud800" <= c <= "\udfff" for c in value)


@pytest.mark.anyio
@pytest.mark.parametrize("field", ["deployment_id", "name", "prompt", "target"])
async def test_hostile_strings_work_or_are_refused_cleanly(nats_url: str, field: str) -> None:
    async with running(nats_url, unique_prefix()) as provider:
        for n, value in enumerate(HOSTILE):
            dep = value if field == "deployment_id" else f"dep-{n}"
            given_schedule = schedule(dep, **({} if field == "deployment_id" else {field: value}))
            refuse = refused_id(value) if field == "deployment_id" else refused_text(value)
            before = await event_count(provider)
            if refuse:
                with pytest.raises(InvalidSchedule) as info:
                    await provider.apply(given_schedule)
                check_message(str(info.value))
                assert await event_count(provider) == before
                continue
            await provider.apply(given_schedule)
            fired = await provider.fire_due(dep, DUE)
            now = await provider.enqueue(EnqueueRequest(dep, Trigger.RUN_NOW,
                                                        requested_by=value[:1000] or "x"))
            assert fired is not None and fired.payload == given_schedule.payload
            assert {r.run_id for r in await provider.list_runs(dep)} == {fired.run_id,
                                                                          now.run_id}
        await assert_consistent(provider)


@pytest.mark.anyio
async def test_hostile_operator_notes(nats_url: str) -> None:
    """who/why of holds, releases and Run now: stored verbatim, or a clean ValueError."""
    async with running(nats_url, unique_prefix()) as provider:
        await provider.apply(schedule("dep"))
        for value in SUBJECT_TOKENS + CONTROL + ["x" * 1000]:
            await provider.hold("dep", by=value, reason=value)
            assert provider.schedules.get("dep").hold.reason == value  # type: ignore[union-attr]
            await provider.release("dep", by=value, reason=value)
            run = await provider.enqueue(EnqueueRequest("dep", Trigger.RUN_NOW,
                                                        requested_by=value), reason=value)
            assert run.requested_by == value
        before = await event_count(provider)
        for value in [*SURROGATES, "x" * 1001, "🙂" * 1001]:
            calls = [
                lambda v=value: provider.hold("dep", by=v, reason="r"),
                lambda v=value: provider.hold("dep", by="b", reason=v),
                lambda v=value: provider.enqueue(EnqueueRequest("dep", Trigger.RUN_NOW,
                                                                requested_by=v)),
                lambda v=value: provider.enqueue(EnqueueRequest("dep", Trigger.RUN_NOW),
                                                 reason=v),
            ]
            for call in calls:
                with pytest.raises(ValueError) as info:
                    await call()
                check_message(str(info.value))
        assert await event_count(provider) == before
        await assert_consistent(provider)


# =========================================================================== max payload


@pytest.mark.anyio
async def test_payload_over_the_limit_is_refused_before_anything_is_written(
    nats_url: str,
) -> None:
    async with running(nats_url, unique_prefix()) as provider:
        before = await event_count(provider)
        with pytest.raises(InvalidSchedule) as info:
            await provider.apply(schedule("big", prompt="p" * 600_000))  # > 512 KiB cap
        assert "too large" in str(info.value) and "512 KiB" in str(info.value)
        check_message(str(info.value))
        assert await event_count(provider) == before


@pytest.mark.anyio
async def test_larger_than_the_servers_max_payload(tmp_path: Path) -> None:
    """A server with max_payload 64 KB: 32 KiB of target+prompt is the most accepted."""
    server = NatsServer(tmp_path / "small", extra_config="max_payload: 65536").start()
    try:
        async with running(server.url, "SMALL") as provider:
            before = await event_count(provider)
            for size in (40_000, 65_000, 2_000_000):
                with pytest.raises(InvalidSchedule) as info:
                    await provider.apply(schedule("big", prompt="p" * size))
                assert "under 32 KiB" in str(info.value)
                check_message(str(info.value))
            assert await event_count(provider) == before
            # the largest accepted Schedule: every later event of it and its Runs still fits
            await provider.apply(schedule("big", target="t" * 1000, prompt="p" * 30_000))
            await provider.hold("big", by="b" * 1000, reason="🙂" * 1000)
            await provider.release("big", by="b" * 1000, reason="🙂" * 1000)
            fired = await provider.fire_due("big", DUE)
            now = await provider.enqueue(EnqueueRequest(
                "big", Trigger.RUN_NOW, requested_by="r" * 1000), reason="é" * 1000)
            assert fired is not None

            async def dispatched() -> bool:
                runs = [await provider.get_run(r.run_id) for r in (fired, now)]
                return all(r.state == RunState.DISPATCHED for r in runs)

            await eventually(dispatched, timeout=10)
            await assert_consistent(provider)
    finally:
        server.stop()

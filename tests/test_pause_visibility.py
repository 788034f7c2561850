"""Pause visibility (issue 4, item 6): after ``apply(enabled=False)`` returns on one replica,
no replica starts a scheduled Run later than ``pause_visibility_seconds``.

The mechanism (docs/architecture.md, "Firing and pause visibility"): ``fire_due`` reads the
Schedule from the stream leader right before it stores a Run, sends the create only while
that read is younger than ``FIRE_READ_MAX_AGE`` and only while connected, and never re-sends
a create without reading again; a create that reaches the store late anyway (its replica
froze mid-send) is refused by the dispatcher before its first claim. So a replica's own view
of the Schedules (its watch) may lag or stall without any effect on what it fires. The tests
pin each part: real processes storming a Schedule while another pauses it (one of them
frozen across the pause), a replica whose watch is stalled, a create whose Schedule read
aged before it could be sent, and creates that reach the store after the pause.

Performance figures (median/worst over many runs) come from bench/pause_visibility.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import pytest

from nats_scheduler import ManualClock
from nats_scheduler.core import runcore
from nats_scheduler.core.events import (
    RunAttemptFailed,
    RunClaimed,
    RunCreated,
    RunFailed,
    RunRecord,
    RunSessionStarted,
    encode,
)
from nats_scheduler.core.pause_visibility import FIRE_READ_MAX_AGE, NOT_STARTED_AFTER_PAUSE
from nats_scheduler.names import HDR_EXPECTED_LAST_SUBJECT_SEQUENCE, Names, scheduled_run_id
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.seam import Run, RunNotFound, RunPayload, RunState, Schedule, Trigger
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.history import deployment_run_history
from tests.harness.replicas import ReplicaSet
from tests.harness.servers import connect_fast, unique_prefix
from tests.harness.shared_handler import SqliteRunHandler
from tests.providers import eventually, running

pytestmark = pytest.mark.anyio

FAR = datetime(2032, 2, 29, tzinfo=UTC)
"""Due times far in the future, of calendars that only have due times on 29 February: the
replicas' tickers never fire them for real while a test runs (fire_due takes any due time)."""


def schedule(deployment_id: str, *, enabled: bool = True, version: int = 1) -> Schedule:
    return Schedule(deployment_id, deployment_id, "* * 29 2 *", "UTC", enabled,
                    RunPayload("t", "p"), version)


def as_json(s: Schedule) -> dict[str, object]:
    return {"deployment_id": s.deployment_id, "cron": s.cron, "timezone": s.timezone,
            "enabled": s.enabled, "version": s.version}


@pytest.fixture
def replica_settings() -> dict[str, object]:
    """Only a store retry budget: the replicas here keep their default call settings."""
    return {"store_retry_seconds": 5.0}


@pytest.mark.slow
async def test_pause_on_one_replica_stops_storming_replicas_within_the_declared_bound(
    replicas: ReplicaSet, handler: SqliteRunHandler,
) -> None:
    """``b`` and ``c`` fire as fast as they can while ``a`` pauses; ``c`` is frozen (SIGSTOP)
    across the pause, so a create it had in hand reaches the store late (when the freeze
    lands between its check and its socket write): such a Run must never start."""
    bound = NatsSchedulerProvider().properties.pause_visibility_seconds
    a, b, c = await replicas.spawn("a", "b", "c")
    await a.send("apply", schedule=as_json(schedule("pv")))
    # each fires its own due times (half a day apart), so both have creates of their own
    # in flight when the Schedule is paused
    for r, after in ((b, FAR), (c, FAR + timedelta(hours=12))):
        await r.send("fire_loop", deployment="pv", after=after.isoformat(), concurrency=4)

    async def stored(r) -> int:  # type: ignore[no-untyped-def]
        return int((await r.send("status"))["loop"]["stored"])

    await eventually(lambda: _all(stored(b), stored(c), at_least=20), timeout=20)
    c.pause()
    try:
        paused = await a.send("apply",
                              schedule=as_json(schedule("pv", enabled=False, version=2)))
        returned_at = float(paused["returned_at"])
        await asyncio.sleep(bound + 0.5)  # the fault itself: frozen well past the bound
    finally:
        c.resume()

    async def kept_trying_past_the_bound(r) -> bool:  # type: ignore[no-untyped-def]
        loop = (await r.send("status"))["loop"]
        return loop["last_started_at"] > returned_at + bound and loop["inactive"] > 0

    for r in (b, c):
        await eventually(lambda r=r: kept_trying_past_the_bound(r), timeout=20)
    for r in (b, c):
        await r.send("stop_loop")

    async def all_finished() -> bool:
        runs = (await a.send("list_runs", deployment="pv"))["runs"]
        return all(r["state"] in ("dispatched", "failed") for r in runs)

    await eventually(all_finished, timeout=30)
    nc = await connect_fast(replicas.url)
    try:
        events = await deployment_run_history(nc.jetstream(), replicas.prefix, "pv")
    finally:
        await nc.close()
    created = {e.event.run.run_id: e for e in events if isinstance(e.event, RunCreated)}
    # started: claimed by a run.claimed, or (a create carrying its claim) past it to a
    # Session or an attempt; a Run the gate refused goes from its create to run.failed
    started = {e.event.run.run_id for e in events
               if isinstance(e.event, RunClaimed | RunSessionStarted | RunAttemptFailed)}
    assert len(created) >= 20 and {e.event.actor for e in created.values()} == {"b", "c"}
    late = {r for r, e in created.items() if e.stored_at.timestamp() - returned_at > bound}
    # What the bound promises: no scheduled Run stored later than it is ever started ...
    assert not late & started
    # ... such a Run is recorded FAILED with the reason, and never reached the handler.
    final = {e.event.run.run_id: e.event for e in events}
    for run_id in late:
        assert isinstance(final[run_id], RunFailed)
        assert final[run_id].error == NOT_STARTED_AFTER_PAUSE
        assert handler.calls(run_id) == []
    last_b = max(e.stored_at.timestamp() for e in created.values() if e.event.actor == "b")
    print(f"late Runs refused: {len(late)}; the running replica's last Run was stored "
          f"{last_b - returned_at:+.3f} s after apply returned")


async def _all(*counts, at_least: int) -> bool:  # type: ignore[no-untyped-def]
    return all(n >= at_least for n in await asyncio.gather(*counts))


async def test_replica_with_a_stalled_schedule_watch_does_not_fire_a_paused_schedule(
    nats_url: str,
) -> None:
    prefix = unique_prefix()
    async with running(nats_url, prefix) as stale, running(nats_url, prefix) as other:
        await other.apply(schedule("watch"))
        await eventually(lambda: stale.schedules.get("watch") is not None)
        # Stall the stale replica's watch of Schedule changes (its projection stops moving;
        # the Schedule follower is the runtime's first).
        assert stale.runtime is not None
        await stale.runtime.followers[0].stop()
        await other.apply(schedule("watch", enabled=False, version=2))
        view = stale.schedules.get("watch")
        assert view is not None and view.enabled, "the stale view still says enabled"

        assert await stale.fire_due("watch", FAR) is None
        with pytest.raises(RunNotFound):
            await other.get_run(scheduled_run_id("watch", FAR))


async def may_start(provider: NatsSchedulerProvider, run: RunRecord) -> bool:
    """The pause gate's verdict on a Run that has not been vetted."""
    assert provider.runtime is not None
    return await provider.runtime.gate.may_start(run, vetted=False)


class _ReadGate:
    """Holds ``fire_due`` between its Schedule read and its create (a stalled loop).

    The read is the firing's: the Schedule table proven current by one shared confirmation
    (runtime/freshness.py), or a leader read when that cannot be proven. A firing reads
    before it announces the Run and again right before the create: the second read is held."""

    def __init__(self, provider: NatsSchedulerProvider) -> None:
        assert provider.firing is not None
        self._read = provider.firing._read
        self.reads = 0
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, deployment_id: str):  # type: ignore[no-untyped-def]
        record = await self._read(deployment_id)
        self.reads += 1
        if self.reads == 2:
            self.reached.set()
            await self.release.wait()
        return record


@pytest.mark.parametrize("aged", [True, False])
async def test_a_create_decided_on_an_aged_schedule_read_is_never_sent(
    nats_url: str, monkeypatch: pytest.MonkeyPatch, aged: bool,
) -> None:
    prefix = unique_prefix()
    clock = ManualClock(datetime.now(UTC))
    async with running(nats_url, prefix, clock=clock) as firing, \
            running(nats_url, prefix) as pausing:
        await pausing.apply(schedule("aged"))
        gate = _ReadGate(firing)
        assert firing.firing is not None
        monkeypatch.setattr(firing.firing, "_read", gate)
        fire = asyncio.create_task(firing.fire_due("aged", FAR))
        await asyncio.wait_for(gate.reached.wait(), 10)
        # The firing replica read "enabled"; now the Schedule is paused elsewhere ...
        await pausing.apply(schedule("aged", enabled=False, version=2))
        if aged:  # ... and its read ages past the limit before the create could leave
            clock.advance(timedelta(seconds=FIRE_READ_MAX_AGE + 0.05))
        gate.release.set()
        run = await asyncio.wait_for(fire, 10)

    if aged:
        assert run is None, "a create decided on an aged read must not be sent"
        assert firing.stale_fires == 1 and gate.reads == 3
    else:
        # Control: a fresh read is acted on (the pause came within the read's age limit,
        # which is what the bound allows for).
        assert run is not None and firing.stale_fires == 0 and gate.reads == 2


async def test_declared_bound_covers_the_read_age_limit() -> None:
    bound = NatsSchedulerProvider().properties.pause_visibility_seconds
    assert FIRE_READ_MAX_AGE < bound <= 1.0


async def _store_late_create(nats_url: str, prefix: str, deployment: str, due: datetime,
                             decided_at: datetime,
                             announcer: NatsSchedulerProvider | None = None) -> RunRecord:
    """Store a scheduled Run's create the way a replica frozen mid-send would: decided (and
    stamped) at ``decided_at`` on a read that said "active", reaching the store only now.

    ``announcer`` writes the announcement (history entry, open key) that the frozen replica
    had written before it froze; the create itself comes from another connection."""
    event = runcore.create(
        run_id=scheduled_run_id(deployment, due), deployment_id=deployment,
        trigger=Trigger.SCHEDULE, due_at=due, payload=RunPayload("t", "p"), now=decided_at,
        actor="frozen-replica",
    )
    if announcer is not None:
        await announcer.runlog.announce(event.run)
    names = Names(prefix)
    nc = await connect_fast(nats_url)
    try:
        await nc.jetstream().publish(
            names.run_subject(deployment, event.run.run_id), encode(event),
            headers={HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: "0"})
    finally:
        await nc.close()
    return event.run


async def test_a_run_that_reaches_the_store_after_the_pause_is_never_started(
    nats_url: str,
) -> None:
    prefix = unique_prefix()
    handler = RecordingRunHandler()
    async with running(nats_url, prefix, handler) as provider:
        await provider.apply(schedule("late"))
        decided_at = datetime.now(UTC)  # the frozen replica read "enabled" here ...
        await provider.apply(schedule("late", enabled=False, version=2))
        late = await _store_late_create(nats_url, prefix, "late", FAR, decided_at - timedelta(
            seconds=1), announcer=provider)  # ... and its create arrives after the pause

        async def refused() -> Run | None:
            with contextlib.suppress(RunNotFound):
                run = await provider.get_run(late.run_id)
                return run if run.state == RunState.FAILED else None
            return None

        run = await eventually(refused, timeout=15)
        assert run.error == NOT_STARTED_AFTER_PAUSE
        assert handler.calls_for(late.run_id) == []


async def test_a_late_run_is_judged_by_the_schedule_as_it_stood_when_the_run_was_stored(
    nats_url: str,
) -> None:
    prefix = unique_prefix()
    handler = RecordingRunHandler()
    async with running(nats_url, prefix, handler) as provider:
        await provider.apply(schedule("walk"))
        old = datetime.now(UTC) - timedelta(seconds=2)
        before_pause = await _store_late_create(nats_url, prefix, "walk", FAR, old)
        await provider.apply(schedule("walk", enabled=False, version=2))
        after_pause = await _store_late_create(nats_url, prefix, "walk",
                                               FAR + timedelta(minutes=1), old)
        await provider.apply(schedule("walk", enabled=False, version=3))  # a later change
        # Stored before the pause: it may start (Runs already started continue) ...
        assert await may_start(provider, before_pause)
        # ... stored while the Schedule was paused: never, whatever changed since.
        assert not await may_start(provider, after_pause)
        # A Run stored promptly after its decision needs no look at the Schedule at all.
        prompt = await _store_late_create(nats_url, prefix, "walk",
                                          FAR + timedelta(minutes=2), datetime.now(UTC))
        assert await may_start(provider, prompt)

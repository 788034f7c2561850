"""History retention on a real server: by count and by age, unfinished Runs kept, and what
is past retention is gone for get_run, list_runs and Replay (docs/configuration.md,
"History retention"; docs/architecture.md, "History and retention")."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from nats.js.api import StreamConfig, StreamSource

from nats_scheduler import NatsSchedulerProvider
from nats_scheduler.jetstream.history import IndexEntry
from nats_scheduler.names import Names
from nats_scheduler.runtime.retention import retention_slice
from nats_scheduler.seam import (
    EnqueueRequest,
    Run,
    RunNotFound,
    RunPayload,
    RunState,
    Schedule,
    SchedulerUnavailable,
    Trigger,
)
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.clocks import OffsetClock
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import eventually, running

pytestmark = pytest.mark.anyio


def schedule(dep: str) -> Schedule:
    # A calendar that never fires during the test: every Run here is a Run now.
    return Schedule(dep, dep, "0 0 29 2 *", "UTC", True, RunPayload("t", f"p-{dep}"), 1)


async def run_now(provider: NatsSchedulerProvider, dep: str) -> Run:
    return await provider.enqueue(EnqueueRequest(dep, Trigger.RUN_NOW, requested_by="test"))


def one_clock(provider: NatsSchedulerProvider) -> NatsSchedulerProvider:
    """One server stamps both the index and the Run events here: no margin for clocks of
    cluster nodes is needed, so retention cuts exactly at the oldest retained entry."""
    assert provider.runtime is not None
    provider.runtime.history.purge_margin = timedelta(0)
    return provider


async def finished(provider: NatsSchedulerProvider, run: Run) -> Run:
    async def check() -> Run | None:
        current = await provider.get_run(run.run_id)
        return current if current.state in (RunState.DISPATCHED, RunState.FAILED) else None
    return await eventually(check, timeout=15)


async def stored_events(url: str, prefix: str, dep: str, run_id: str) -> int:
    """How many events of the Run the Run events stream still holds."""
    names = Names(prefix)
    nc = await connect_fast(url)
    try:
        info = await nc.jetstream().stream_info(
            names.runs_stream, subjects_filter=names.run_subject(dep, run_id))
        return sum((info.state.subjects or {}).values())
    finally:
        await nc.close()


async def last_event(url: str, prefix: str, dep: str, run_id: str) -> dict[str, object]:
    """The Run's newest stored event, as JSON."""
    names = Names(prefix)
    nc = await connect_fast(url)
    try:
        msg = await nc.jetstream().get_last_msg(names.runs_stream, names.run_subject(dep, run_id))
        return msgspec.json.decode(msg.data)
    finally:
        await nc.close()


async def test_each_deployment_keeps_its_newest_runs_and_unfinished_ones(nats_url: str) -> None:
    prefix = unique_prefix()
    handler = RecordingRunHandler()
    async with running(nats_url, prefix, handler, retention_runs=3, call_timeout=60.0,
                       retention_interval=3600.0) as provider:
        one_clock(provider)
        await provider.apply(schedule("busy"))
        await provider.apply(schedule("other"))
        gate = handler.block(deployment_id="busy", times=1)
        stuck = await run_now(provider, "busy")  # held in start_session: stays unfinished
        await eventually(lambda: handler.calls_for(stuck.run_id))
        done = [await finished(provider, await run_now(provider, "busy")) for _ in range(4)]
        other = await finished(provider, await run_now(provider, "other"))

        # The newest three of "busy" are listed; the unfinished oldest one is still there.
        listed = [r.run_id for r in await provider.list_runs("busy", limit=10)]
        assert listed[:3] == [r.run_id for r in reversed(done[-3:])]
        assert (await provider.get_run(stuck.run_id)).state == RunState.DISPATCHING
        # The oldest finished one is past retention: gone for get_run and Replay.
        with pytest.raises(RunNotFound):
            await provider.get_run(done[0].run_id)
        with pytest.raises(RunNotFound):
            await provider.enqueue(EnqueueRequest("busy", Trigger.REPLAY,
                                                  replay_of=done[0].run_id))
        assert done[0].run_id not in listed
        assert [r.run_id for r in await provider.list_runs("other")] == [other.run_id]

        # Enforcement removes its events, never those of the unfinished Run.
        assert await stored_events(nats_url, prefix, "busy", done[0].run_id) > 0
        await provider.enforce_retention()
        assert await stored_events(nats_url, prefix, "busy", done[0].run_id) == 0
        assert await stored_events(nats_url, prefix, "busy", stuck.run_id) > 0
        for run in done[1:]:
            assert await stored_events(nats_url, prefix, "busy", run.run_id) > 0
        assert await stored_events(nats_url, prefix, "other", other.run_id) > 0

        # Once it finishes, the oldest Run is subject to retention like any other.
        gate.release()
        await eventually(lambda: stuck.run_id not in {r.run_id for r in
                                                      provider.ledger.unfinished()}, timeout=15)
        assert [c.method for c in handler.calls_for(stuck.run_id)][-1] == "admit_turn"
        with pytest.raises(RunNotFound):
            await provider.get_run(stuck.run_id)


async def test_runs_older_than_the_age_limit_leave_the_history(nats_url: str) -> None:
    prefix = unique_prefix()
    handler = RecordingRunHandler()
    age = 3.0  # seconds: the server drops index entries this old
    async with running(nats_url, prefix, handler, retention_days=age / 86400,
                       call_timeout=60.0, retention_interval=3600.0) as provider:
        one_clock(provider)
        await provider.apply(schedule("aging"))
        gate = handler.block(deployment_id="aging", times=1)
        unfinished = await run_now(provider, "aging")
        await eventually(lambda: handler.calls_for(unfinished.run_id))
        old = await finished(provider, await run_now(provider, "aging"))
        assert {r.run_id for r in await provider.list_runs("aging")} == {
            old.run_id, unfinished.run_id}

        async def aged_out() -> bool:
            try:
                await provider.get_run(old.run_id)
            except RunNotFound:
                return True
            return False

        await eventually(aged_out, timeout=age + 10)
        listed = [r.run_id for r in await provider.list_runs("aging")]
        assert old.run_id not in listed
        # Unfinished: still readable, whatever its age, and its events survive enforcement.
        assert (await provider.get_run(unfinished.run_id)).state == RunState.DISPATCHING
        async def purged() -> bool:  # once the server dropped the aged entry (its own clock)
            await provider.enforce_retention()
            return await stored_events(nats_url, prefix, "aging", old.run_id) == 0

        await eventually(purged, timeout=15, interval=0.5)
        assert await stored_events(nats_url, prefix, "aging", unfinished.run_id) > 0
        # A new Run is part of the history as usual.
        fresh = await finished(provider, await run_now(provider, "aging"))
        assert fresh.run_id in [r.run_id for r in await provider.list_runs("aging")]
        gate.release()
        await eventually(lambda: not provider.ledger.unfinished(), timeout=15)


async def test_a_restarted_replica_finds_every_unfinished_run_without_the_history(
    nats_url: str,
) -> None:
    prefix = unique_prefix()
    handler = RecordingRunHandler()
    handler.fail_forever(deployment_id="later")  # retried for a long time: stays unfinished
    async with running(nats_url, prefix, handler, retry_initial=3600.0,
                       retry_cap=3600.0) as first:
        await first.apply(schedule("later"))
        await first.apply(schedule("noise"))
        waiting = await run_now(first, "later")
        await eventually(lambda: handler.calls_for(waiting.run_id))
        for _ in range(30):
            await run_now(first, "noise")
        await eventually(lambda: not [r for r in first.ledger.unfinished()
                                      if r.deployment_id == "noise"], timeout=15)
    # The stop handed the waiting Run back, saying why (the trail an auditor reads).
    released = await last_event(nats_url, prefix, "later", waiting.run_id)
    assert (released["type"], released["reason"]) == (
        "run.released", "the process holding it stopped")
    async with running(nats_url, prefix, RecordingRunHandler()) as second:
        # Start-up loaded the open Runs, then (in the background, once the Schedules are
        # loaded) each deployment's newest Run: not the history.
        assert [r.run_id for r in second.ledger.unfinished()] == [waiting.run_id]
        await eventually(lambda: second.ledger.summary("noise").last is not None, timeout=15)
        # ... and the recovery sweep takes the waiting Run over (it waits for its retry time).
        await eventually(lambda: second.dispatcher is not None
                         and waiting.run_id in second.dispatcher.in_flight, timeout=15)


async def test_list_runs_pages_a_long_history_newest_first(nats_url: str) -> None:
    prefix = unique_prefix()
    async with running(nats_url, prefix) as provider:
        await provider.apply(schedule("pages"))
        made = [await run_now(provider, "pages") for _ in range(45)]
        expected = sorted(made, key=lambda r: (r.created_at, r.run_id), reverse=True)
        seen: list[str] = []
        before = None
        while True:
            page = await provider.list_runs("pages", limit=10, before=before)
            seen.extend(r.run_id for r in page)
            if len(page) < 10:
                break
            before = page[-1].run_id
        assert seen == [r.run_id for r in expected]
        with pytest.raises(RunNotFound):
            await provider.list_runs("pages", before="no-such-run")


async def test_a_mirror_keeps_what_retention_purges(nats_url: str) -> None:
    """The audit guide's "Keeping everything longer": a mirror of the Run events keeps every
    event after the scheduler purged them for retention."""
    prefix = unique_prefix()
    names = Names(prefix)
    async with running(nats_url, prefix, retention_runs=1, retention_interval=3600.0) as provider:
        one_clock(provider)
        await provider.apply(schedule("kept"))
        nc = await connect_fast(nats_url)
        try:
            js = nc.jetstream()
            archive = f"{prefix}_RUNS_ARCHIVE"
            await js.add_stream(StreamConfig(name=archive, mirror=StreamSource(
                name=names.runs_stream), deny_delete=True, deny_purge=True))
            first = await finished(provider, await run_now(provider, "kept"))
            await finished(provider, await run_now(provider, "kept"))

            async def archived() -> int:
                info = await js.stream_info(archive, subjects_filter=names.run_subject(
                    "kept", first.run_id))
                return sum((info.state.subjects or {}).values())

            # The mirror copies as events are stored (retention purges days-old events, long
            # after the copy); then the purge of the source leaves the copy alone.
            copied = await stored_events(nats_url, prefix, "kept", first.run_id)
            assert copied >= 3  # created, claimed, session started, dispatched

            async def all_copied() -> bool:  # the mirror catches up event by event
                return await archived() == copied

            await eventually(all_copied, timeout=10)
            await provider.enforce_retention()
            assert await stored_events(nats_url, prefix, "kept", first.run_id) == 0
            assert await archived() == copied
            await js.delete_stream(archive)
        finally:
            await nc.close()


async def test_the_clock_of_a_page_is_the_servers(nats_url: str) -> None:
    """A replica whose clock is far off still pages the history right (windows are read in
    the server's time; the writers' clocks only order Runs)."""
    from nats_scheduler.clock import ManualClock

    prefix = unique_prefix()
    clock = ManualClock(datetime(2031, 6, 1, tzinfo=UTC))
    async with running(nats_url, prefix, clock=clock) as provider:
        await provider.apply(schedule("skewed"))
        made = []
        for _ in range(12):
            made.append(await run_now(provider, "skewed"))
            clock.advance(timedelta(minutes=7))
            await asyncio.sleep(0)
        page = await provider.list_runs("skewed", limit=5)
        assert [r.run_id for r in page] == [r.run_id for r in reversed(made[-5:])]
        rest = await provider.list_runs("skewed", limit=50, before=page[-1].run_id)
        assert [r.run_id for r in rest] == [r.run_id for r in reversed(made[:-5])]


async def test_the_default_margin_keeps_runs_stored_close_to_the_oldest_retained(
    nats_url: str,
) -> None:
    """On a cluster two nodes' clocks may stamp the index and the Run events: enforcement
    keeps what was stored within the margin before the oldest retained entry."""
    prefix = unique_prefix()
    async with running(nats_url, prefix, retention_runs=1, retention_interval=3600.0) as provider:
        await provider.apply(schedule("close"))
        runs = [await finished(provider, await run_now(provider, "close")) for _ in range(3)]
        await provider.enforce_retention()
        for run in runs:  # all stored within a second: inside the default margin
            assert await stored_events(nats_url, prefix, "close", run.run_id) > 0
        # ... while the history already shows only the newest.
        assert [r.run_id for r in await provider.list_runs("close")] == [runs[-1].run_id]


async def test_the_newest_run_of_more_deployments_than_one_read_may_ask_for(
    nats_url: str,
) -> None:
    """The server answers "last message per subject" for at most 1,024 subjects, and refuses
    more (413): the history reads in chunks, and a refusal is never a silently short answer."""
    prefix = unique_prefix()
    names = Names(prefix)
    async with running(nats_url, prefix) as provider:
        nc = await connect_fast(nats_url)
        try:
            js = nc.jetstream()
            ids = [f"dep-{i:04d}" for i in range(1100)]
            for i, dep in enumerate(ids):
                entry = IndexEntry(run_id=f"run-{i}", created_at=datetime.now(UTC))
                await js.publish_async(names.index_subject(dep), msgspec.json.encode(entry))
            await js.publish_async_completed()
        finally:
            await nc.close()
        assert provider.runtime is not None
        latest = await provider.runtime.history.latest(ids)
        assert len(latest) == 1100 and latest["dep-1099"].run_id == "run-1099"
        with pytest.raises(SchedulerUnavailable):  # one read for all of them: refused, loudly
            await provider.store.direct_batch(names.index_stream, {
                "multi_last": [names.index_filter], "batch": 2000})


def test_retention_passes_visit_every_deployment_within_a_round() -> None:
    """Each pass trims a slice; consecutive passes cover every deployment once per round."""
    deployments = [f"d{i:03d}" for i in range(100)]
    seen: list[str] = []
    cursor = 0
    for _ in range(6):  # a 600 s interval: six passes per 3600 s round
        batch, cursor = retention_slice(deployments, cursor, 600.0, 3600.0)
        assert 0 < len(batch) <= 17
        seen += batch
    assert sorted(seen) == deployments
    batch, _ = retention_slice(deployments, cursor, 600.0, 3600.0)
    assert batch[0] == "d000", "the next round starts again from the first"
    assert retention_slice(deployments, 0, 7200.0, 3600.0)[0] == deployments
    assert retention_slice([], 5, 600.0, 3600.0) == ([], 0)


async def test_a_clock_stepped_forward_runs_no_retention_pass_early(nats_url: str) -> None:
    """The retention interval is a period of elapsed time: a wall clock stepped forward by
    days (an operator fixing the time) must not run passes back to back."""
    clock = OffsetClock()
    async with running(nats_url, unique_prefix(), clock=clock,
                       retention_interval=3600.0) as provider:
        assert provider.runtime is not None
        passes: list[datetime] = []
        retention = provider.runtime.retention
        original = retention.run_pass

        async def counted() -> int:
            passes.append(clock.now())
            return await original()

        retention.run_pass = counted  # type: ignore[method-assign]
        for step in range(3):
            clock.step(2 * 86400)  # wakes every sleeper on the clock at once
            # round trips to the server: a woken retention loop would have run its pass
            await provider.apply(schedule(f"after-step-{step}"))
            assert (await run_now(provider, f"after-step-{step}")).run_id
        assert passes == []


async def test_a_pass_asks_nothing_more_of_a_history_with_nothing_before_its_oldest(
    nats_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Retention searches by time and purges only where some Run event lies before the
    deployment's oldest retained Run: a deployment never trimmed, or trimmed by an earlier
    pass, costs two reads, which is what a pass over a million deployments is made of
    (docs/benchmarks.md); one trimmed since still loses exactly its Runs past retention."""
    prefix = unique_prefix()
    async with running(nats_url, prefix, retention_runs=2, retention_interval=3600.0) as p:
        one_clock(p)
        for dep in ("trimmed", "short"):
            await p.apply(schedule(dep))
        runs = [await finished(p, await run_now(p, "trimmed")) for _ in range(4)]
        short = await finished(p, await run_now(p, "short"))
        assert p.runtime is not None
        store = p.runtime.history._store
        asked: list[str] = []
        real_purge, real_batch = store.purge_subject, store.direct_batch

        async def purge_subject(stream: str, subject: str, **kwargs: object) -> None:
            asked.append(f"purge {subject.rsplit('.', 2)[-2]}")
            await real_purge(stream, subject, **kwargs)  # type: ignore[arg-type]

        async def direct_batch(stream: str, request: dict[str, object]) -> object:
            if "start_time" in request:
                asked.append(f"search {str(request['next_by_subj']).rsplit('.', 2)[-2]}")
            return await real_batch(stream, request)

        monkeypatch.setattr(store, "purge_subject", purge_subject)
        monkeypatch.setattr(store, "direct_batch", direct_batch)
        trimmed, untouched = Names(prefix).run_subject("trimmed", "x").rsplit(".", 2)[-2], \
            Names(prefix).run_subject("short", "x").rsplit(".", 2)[-2]
        await p.enforce_retention()
        assert f"search {trimmed}" in asked and f"purge {trimmed}" in asked
        assert not [a for a in asked if untouched in a], "nothing before its oldest Run"
        for run in runs[:2]:
            assert await stored_events(nats_url, prefix, "trimmed", run.run_id) == 0
        for run in runs[2:]:
            assert await stored_events(nats_url, prefix, "trimmed", run.run_id) > 0
        assert await stored_events(nats_url, prefix, "short", short.run_id) > 0
        asked.clear()
        await p.enforce_retention()  # trimmed already: nothing left before its oldest
        assert asked == []
        for run in runs[2:]:
            assert await stored_events(nats_url, prefix, "trimmed", run.run_id) > 0

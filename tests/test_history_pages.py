"""Pages of the Run history on a real server: complete and in order whatever the layout of
the index, a few pipelined rounds of reads whatever the history's length, and what this
process holds merged in without scanning it (docs/architecture.md, "History and
retention")."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from nats_scheduler import NatsSchedulerProvider
from nats_scheduler.clock import ManualClock
from nats_scheduler.core import runcore
from nats_scheduler.core.events import RunRecord, encode
from nats_scheduler.jetstream.direct import DirectRefused, reader_of
from nats_scheduler.jetstream.history import IndexEntry
from nats_scheduler.names import HDR_MSG_ID, Names, index_msg_id, random_run_id
from nats_scheduler.projections.reads import FRESH, FreshRuns
from nats_scheduler.seam import RunNotFound, RunPayload, Schedule, Trigger
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import running

pytestmark = pytest.mark.anyio

PAYLOAD = RunPayload("agent:test", "summarise")


def schedule(dep: str) -> Schedule:
    return Schedule(dep, dep, "0 0 29 2 *", "UTC", True, PAYLOAD, 1)


async def store_runs(url: str, prefix: str, plan: list[tuple[str, datetime]],
                     run_ids: list[str] | None = None) -> list[RunRecord]:
    """Store finished Runs as the provider writes them (index entry acknowledged first, then
    ``run.created`` with its index sequence, ``run.claimed``, ``run.dispatched``); ``plan``
    in the Runs' order, so the entries are in order (``ordered``) as the provider's are."""
    ids = run_ids or [random_run_id() for _ in plan]
    names = Names(prefix)
    nc = await connect_fast(url)
    made: list[RunRecord] = []
    try:
        js = nc.jetstream(timeout=10)
        acks = []
        for (dep, at), run_id in zip(plan, ids, strict=True):
            entry = msgspec.json.encode(IndexEntry(run_id=run_id, created_at=at, ordered=True))
            acks.append((dep, run_id, at, await js.publish_async(
                names.index_subject(dep), entry, headers={HDR_MSG_ID: index_msg_id(run_id)})))
        await js.publish_async_completed()
        for dep, run_id, at, ack in acks:
            created = runcore.indexed(runcore.create(
                run_id=run_id, deployment_id=dep, trigger=Trigger.RUN_NOW, due_at=None,
                payload=PAYLOAD, now=at, actor="test"), (await ack).seq)
            claimed = runcore.claim(created.run, holder="test", now=at)
            done = runcore.dispatched(claimed.run, turn_id="t", now=at, actor="test")
            subject = names.run_subject(dep, run_id)
            for event in (created, claimed, done):
                await js.publish_async(subject, encode(event))
            made.append(done.run)
        await js.publish_async_completed()
    finally:
        await nc.close()
    return made


def newest_first(runs: list[RunRecord]) -> list[str]:
    return [r.run_id for r in sorted(runs, key=lambda r: (r.created_at, r.run_id), reverse=True)]


async def walk(provider: NatsSchedulerProvider, dep: str, limit: int) -> list[str]:
    seen: list[str] = []
    before = None
    while True:
        page = await provider.list_runs(dep, limit=limit, before=before)
        seen.extend(r.run_id for r in page)
        if len(page) < limit:
            return seen
        before = page[-1].run_id


async def test_pages_of_a_sparse_deployment_among_busy_ones_are_complete_and_in_order(
    nats_url: str,
) -> None:
    """One deployment's entries are a tenth of the index, unevenly spread, and Runs share a
    created_at (ties: run_id descending; the larger one written later, as one clock does): a
    replica that holds none of them pages through all of them, and through the busy
    deployment's, each Run exactly once."""
    prefix = unique_prefix()
    async with running(nats_url, prefix) as provider:
        await provider.apply(schedule("sparse"))
        await provider.apply(schedule("busy"))
    rng = random.Random(7)
    base = datetime.now(UTC) - timedelta(hours=2)
    plan = []
    for i in range(1500):
        # the sparse deployment writes in bursts: dense at the start, rare later
        dep = "sparse" if (i < 200 and i % 2) or rng.random() < 0.03 else "busy"
        plan.append((dep, base + timedelta(seconds=i // 3)))  # three Runs per second: ties
    # Within one created_at the larger run_id later: the index's order is the Runs' order.
    ids = [run_id for i in range(0, 1500, 3)
           for run_id in sorted(random_run_id() for _ in range(3))]
    made = await store_runs(nats_url, prefix, plan, ids)
    async with running(nats_url, prefix) as fresh:  # holds none of them
        for dep, limit in (("sparse", 7), ("sparse", 50), ("busy", 50), ("busy", 333)):
            expected = newest_first([r for r in made if r.deployment_id == dep])
            assert await walk(fresh, dep, limit) == expected, (dep, limit)
        assert await fresh.list_runs("nobody") == []
        with pytest.raises(RunNotFound):  # a Run of another deployment is no cursor
            await fresh.list_runs("sparse", before=expected[0])


async def test_a_page_costs_three_rounds_of_reads_whatever_the_history(nats_url: str) -> None:
    """The first page and a deep page of a long history, with a cursor this process never
    held: each is at most three rounds of pipelined reads."""
    prefix = unique_prefix()
    async with running(nats_url, prefix) as provider:
        await provider.apply(schedule("long"))
    base = datetime.now(UTC) - timedelta(days=3)  # older than a start's warm-up reads
    made = await store_runs(nats_url, prefix,
                            [("long", base + timedelta(seconds=i)) for i in range(3000)])
    expected = newest_first(made)
    async with running(nats_url, prefix) as fresh:
        reader = reader_of(fresh.store.nc)
        rounds: list[int] = []
        real = reader.get_many

        async def counted(requests, timeout):  # type: ignore[no-untyped-def]
            rounds.append(len(requests))
            return await real(requests, timeout)

        reader.get_many = counted  # type: ignore[method-assign]
        first = await fresh.list_runs("long", limit=50)
        assert [r.run_id for r in first] == expected[:50]
        assert len(rounds) == 3, rounds
        rounds.clear()
        assert fresh.ledger.get(expected[2499]) is None  # the page reads the cursor too
        deep = await fresh.list_runs("long", limit=50, before=expected[2499])
        assert [r.run_id for r in deep] == expected[2500:2550]
        assert len(rounds) == 3, rounds


async def test_what_this_process_holds_joins_the_page(nats_url: str) -> None:
    """An unfinished Run the history lacks (its entry aged out, or not read yet) and a Run
    created a moment ago join the page; a finished Run the history lacks does not."""
    prefix = unique_prefix()
    async with running(nats_url, prefix) as provider:
        await provider.apply(schedule("held"))
        now = datetime.now(UTC)

        def record(run_id: str, at: datetime, *, finished: bool) -> RunRecord:
            created = runcore.create(run_id=run_id, deployment_id="held",
                                     trigger=Trigger.RUN_NOW, due_at=None, payload=PAYLOAD,
                                     now=at, actor="test")
            if not finished:
                return created.run
            claimed = runcore.claim(created.run, holder="test", now=at)
            return runcore.dispatched(claimed.run, turn_id="t", now=at, actor="test").run

        waiting = record("m-waiting", now - timedelta(hours=1), finished=False)
        just_made = record("m-just-made", now, finished=True)
        old_done = record("m-old-done", now - timedelta(hours=2), finished=True)
        for seq, r in enumerate((waiting, just_made, old_done), start=1):
            provider.ledger.apply(10**9 + seq, r)
        page = await provider.list_runs("held", limit=10)
        assert [r.run_id for r in page] == ["m-just-made", "m-waiting"]
        assert await provider.list_runs("other", limit=10) == []


def test_fresh_runs_are_remembered_for_a_moment_only() -> None:
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
    fresh = FreshRuns(clock)
    now = clock.now()

    def run(run_id: str, dep: str, at: datetime) -> RunRecord:
        return runcore.create(run_id=run_id, deployment_id=dep, trigger=Trigger.RUN_NOW,
                              due_at=None, payload=PAYLOAD, now=at, actor="test").run

    fresh.note(run("m-a", "d1", now))
    fresh.note(run("m-b", "d2", now))
    fresh.note(run("m-old", "d1", now - FRESH - timedelta(seconds=1)))  # never fresh
    fresh.note(run("m-a", "d1", now))  # a later state of the same Run: one entry
    assert fresh.of("d1", now) == ["m-a"] and fresh.of("d2", now) == ["m-b"]
    clock.advance(FRESH + timedelta(seconds=1))
    fresh.note(run("m-c", "d1", clock.now()))
    assert fresh.of("d1", clock.now()) == ["m-c"] and fresh.of("d2", clock.now()) == []
    assert len(fresh._order) == 1 and set(fresh._by_deployment) == {"d1"}  # nothing kept


async def test_reads_sent_together_get_their_own_answers(nats_url: str) -> None:
    """Pipelined direct gets on one standing subscription: each answer is its own request's,
    an empty answer is empty, and a refusal is raised, never a short answer."""
    prefix = unique_prefix()
    names = Names(prefix)
    async with running(nats_url, prefix) as provider:
        await provider.apply(schedule("a"))
        await provider.apply(schedule("b"))
    base = datetime.now(UTC) - timedelta(minutes=5)
    made = await store_runs(nats_url, prefix, [(d, base + timedelta(seconds=i))
                                               for i, d in enumerate("abab")])
    nc = await connect_fast(nats_url)
    try:
        reader = reader_of(nc)
        assert reader_of(nc) is reader
        answers = await reader.get_many([
            (names.index_stream, {"next_by_subj": names.index_subject("b"), "batch": 10}),
            (names.index_stream, {"next_by_subj": names.index_subject("a"), "batch": 10,
                                  "no_hdr": True}),
            (names.runs_stream, {"last_by_subj": names.run_subject("a", made[0].run_id),
                                 "no_hdr": True}),
            (names.index_stream, {"next_by_subj": names.index_subject("nobody"), "batch": 5}),
            (names.runs_stream, {"last_by_subj": names.run_subject("a", "m-none")}),
        ], timeout=5)
        b_ids = [msgspec.json.decode(m.data)["run_id"] for m in answers[0].messages]
        assert b_ids == [made[1].run_id, made[3].run_id]
        assert answers[0].last_seq == 4 and answers[0].pending == 0
        assert [m.headers for m in answers[1].messages] == [None, None]
        assert len(answers[2].messages) == 1 and answers[2].messages[0].headers is None
        assert answers[3].messages == [] and answers[4].messages == []
        with pytest.raises(DirectRefused) as refused:
            await reader.get_many([(names.index_stream, {"batch": 1})], timeout=5)
        assert refused.value.status == "408"
    finally:
        await nc.close()

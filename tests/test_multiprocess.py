"""Cluster-wide guarantees across real OS processes (issue 4, items 1-4).

Every replica here is a separate ``python -m tests.harness.replica`` process with a
``SqliteRunHandler`` on one shared file, so Sessions are counted across processes the way
AstraBox would count them. Faults are real signals by PID: SIGKILL mid-call, SIGSTOP past the
lease. Who wrote what is read back from the store (every event names its writer).

Handler calls are held at a known point with the shared handler's ``hang_start`` /
``hang_admit`` rules (the test waits for the ``hang`` record, then signals the holder), so
the kill lands exactly where the test says, not where a timer happened to be. The last test
is in one process on purpose: it opens, deterministically, the one window that signals
cannot aim at (a lease taken over whose new holder has not written yet).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from nats_scheduler import ManualClock
from nats_scheduler.core import calendar
from nats_scheduler.core.events import RunClaimed, RunCreated
from nats_scheduler.jetstream.leases import LeaseValue
from nats_scheduler.names import scheduled_run_id, token
from nats_scheduler.seam import RunPayload, Schedule
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.harness.history import StoredEvent, run_history
from tests.harness.replicas import ReplicaProcess, ReplicaSet
from tests.harness.scenario import LEASE, steered_pair
from tests.harness.servers import connect_fast, unique_prefix
from tests.harness.shared_handler import CallRecord, SqliteRunHandler
from tests.providers import eventually, running

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

REPLICA_SETTINGS: dict[str, object] = {
    "call_timeout": 30.0,  # a held ("hang") call must outlive the test's kill, not time out
    "retry_initial": 0.05,
    "retry_cap": 0.2,
    "drain_seconds": 2.0,
    "store_retry_seconds": 5.0,
}

FAR = datetime(2032, 2, 29, tzinfo=UTC)
"""Due times far in the future, of calendars that only have due times on 29 February: the
replicas' tickers never fire them for real while a test runs (fire_due takes any due time)."""


def schedule(deployment_id: str, cron: str = "0 3 29 2 *", **extra: Any) -> dict[str, Any]:
    return {"deployment_id": deployment_id, "cron": cron, "timezone": "UTC", "version": 1,
            "enabled": True, **extra}


@pytest.fixture
def replica_settings() -> dict[str, object]:
    """Settings of the shared ``replicas`` here: held calls outlive the test's kill."""
    return REPLICA_SETTINGS


async def history(nats_url: str, prefix: str, deployment: str, run_id: str) -> list[StoredEvent]:
    nc = await connect_fast(nats_url)
    try:
        return await run_history(nc.jetstream(), prefix, deployment, run_id)
    finally:
        await nc.close()


def hangs(handler: SqliteRunHandler, run_id: str) -> list[CallRecord]:
    return [c for c in handler.calls(run_id) if c.outcome == "hang"]


def by_identity(replicas: list[ReplicaProcess], identity: str) -> ReplicaProcess:
    return next(r for r in replicas if r.identity == identity)


async def fire_one(replica: ReplicaProcess, deployment: str, due: datetime) -> str:
    answer = await replica.send("fire", deployment=deployment, dues=[due.isoformat()])
    (run_id,) = answer["runs"]
    assert run_id is not None
    return str(run_id)


async def dispatched_run(replica: ReplicaProcess, run_id: str, timeout: float = 10) -> Any:
    """The Run as ``replica`` lists it, once it shows DISPATCHED."""

    async def check() -> Any:
        run = (await replica.send("get_run", run_id=run_id))["run"]
        return run if run["state"] == "dispatched" else None

    return await eventually(check, timeout)


async def dispatched_runs(replica: ReplicaProcess, deployment: str, count: int,
                          timeout: float = 10) -> Any:
    """The deployment's Runs as ``replica`` lists them, once ``count`` are all DISPATCHED."""

    async def check() -> Any:
        runs = (await replica.send("list_runs", deployment=deployment))["runs"]
        done = len(runs) == count and all(r["state"] == "dispatched" for r in runs)
        return runs if done else None

    return await eventually(check, timeout)


def assert_one_session(handler: SqliteRunHandler, run_id: str, run: dict[str, Any]) -> None:
    """AstraBox saw one Session for the Run, and every call and the Run carry it."""
    session = handler.sessions()[run_id]
    assert run["state"] == "dispatched"
    assert run["session_id"] == session
    assert run["turn_id"] == handler.turns()[run_id]
    for call in handler.calls(run_id):
        if call.method == "admit_turn" or call.session_id is not None:
            assert call.session_id == session


# --------------------------------------------------------------------------- firing


async def test_three_replicas_storming_the_same_due_times_make_one_run_and_one_session_each(
    replicas: ReplicaSet, handler: SqliteRunHandler,
) -> None:
    a, b, c = await replicas.spawn("a", "b", "c")
    await a.send("apply", schedule=schedule("storm", "*/5 1-3 29 2 *"))
    dues = calendar.due_times("*/5 1-3 29 2 *", "UTC", FAR, FAR.replace(hour=4))
    assert len(dues) == 36
    start_at = time.time() + 0.5  # all three start their storm at the same instant
    answers = await asyncio.gather(*(
        r.send("fire", deployment="storm", dues=[d.isoformat() for d in dues], repeat=3,
               start_at=start_at)
        for r in (a, b, c)))
    by_due: dict[datetime, set[str]] = {}
    for answer in answers:
        for i, run_id in enumerate(answer["runs"]):
            assert run_id is not None
            by_due.setdefault(dues[i // 3], set()).add(run_id)
    assert all(len(ids) == 1 for ids in by_due.values())
    run_ids = {ids.pop() for ids in by_due.values()}
    assert len(run_ids) == 36

    await eventually(lambda: set(handler.turns()) >= run_ids, timeout=30)
    assert set(handler.sessions()) == run_ids  # one Session per Run, none for anything else
    listed = await dispatched_runs(a, "storm", 36)
    assert {run["run_id"] for run in listed} == run_ids
    for run in listed:
        assert_one_session(handler, run["run_id"], run)

    async def same_history_everywhere() -> bool:
        views = [await r.send("list_runs", deployment="storm") for r in (b, c)]
        return all([x["run_id"] for x in v["runs"]] == [x["run_id"] for x in listed]
                   for v in views)

    await eventually(same_history_everywhere, timeout=10)


@pytest.mark.wall_clock(boundary=True)
@pytest.mark.timeout(200)
async def test_three_replicas_fire_a_real_minute_boundary_once(
    replicas: ReplicaSet, handler: SqliteRunHandler,
) -> None:
    """The only test that waits for the wall clock: up to one minute (two if a boundary
    falls while the replicas start).

    Each due time has one owner among the live replicas; the others leave it to the owner
    and would fire it only after a grace. So 30 Schedules due in the same minute make 30
    Runs, created by more than one replica (the work is shared), none twice."""
    a, b, c = await replicas.spawn("a", "b", "c")
    deployments = [f"minute-{i}" for i in range(30)]
    for deployment in deployments:
        await a.send("apply", schedule=schedule(deployment, "* * * * *"))

    async def due_fired() -> datetime | None:
        fired = [datetime.fromisoformat(due) for r in (a, b, c)
                 for dep, due in (await r.send("status"))["ticker_fires"]
                 if dep in deployments]
        return min(fired) if fired else None

    due = await eventually(due_fired, timeout=150, interval=0.25)
    run_ids = [scheduled_run_id(deployment, due) for deployment in deployments]
    await eventually(lambda: set(run_ids) <= set(handler.turns()), timeout=30)
    creators = set()
    for deployment, run_id in zip(deployments, run_ids, strict=True):
        runs = (await b.send("list_runs", deployment=deployment))["runs"]
        of_due = [r for r in runs if datetime.fromisoformat(r["due_at"]) == due]
        assert [r["run_id"] for r in of_due] == [run_id], runs
        # the ticker never backfills: no Run for a minute before the replicas knew it
        assert all(datetime.fromisoformat(r["due_at"]) >= due for r in runs)
        events = await history(replicas.url, replicas.prefix, deployment, run_id)
        assert events[0].type == "run.created"
        creators.add(events[0].event.actor)
        final = await dispatched_run(c, run_id)
        assert_one_session(handler, run_id, final)
    assert len(creators) >= 2, f"one replica fired every due time: {creators}"


# --------------------------------------------------------------------------- takeover


async def _takeover_after_kill(
    replicas: ReplicaSet, handler: SqliteRunHandler, rule: str
) -> tuple[str, list[StoredEvent], float]:
    """Hold the first call at ``rule``, SIGKILL its holder, let the other replica finish.

    Returns (run_id, its history, seconds from the kill to the Run being dispatched).
    """
    deployment = f"kill-{rule}"
    a, b = await steered_pair(replicas, handler, schedule(deployment), rule)
    run_id = await fire_one(a, deployment, FAR.replace(hour=3))
    (hang,) = await eventually(lambda: hangs(handler, run_id), timeout=15)
    holder = by_identity([a, b], hang.process)
    survivor = b if holder is a else a
    await holder.killed()
    killed_at = time.monotonic()
    handler.set_rule(deployment, None)

    await eventually(lambda: run_id in handler.turns(), timeout=LEASE + 5)
    took = time.monotonic() - killed_at
    run = await dispatched_run(survivor, run_id)
    assert_one_session(handler, run_id, run)
    events = await history(replicas.url, replicas.prefix, deployment, run_id)
    # the first claim is the holder's: in its create (schema 2) or a run.claimed
    claims = [e for e in events if isinstance(e.event, RunClaimed)
              or (isinstance(e.event, RunCreated) and e.event.holder is not None)]
    assert [c.event.holder for c in claims] == [holder.identity, survivor.identity]
    assert claims[-1].event.takeover_from == holder.identity
    assert events[-1].type == "run.dispatched" and events[-1].event.actor == survivor.identity
    return run_id, events, took


async def test_holder_killed_between_start_session_and_admit_turn_is_taken_over(
    replicas: ReplicaSet, handler: SqliteRunHandler,
) -> None:
    run_id, events, _ = await _takeover_after_kill(replicas, handler, "hang_admit")
    session = handler.sessions()[run_id]
    # the Session was stored before the kill; the survivor was handed exactly that one
    # the create carries the first holder's claim; the survivor's takeover is a run.claimed
    assert [e.type for e in events] == ["run.created", "run.session_started",
                                        "run.claimed", "run.dispatched"]
    survivor = events[-1].event.actor
    survivor_calls = [c for c in handler.calls(run_id) if c.process == survivor]
    assert [c.method for c in survivor_calls] == ["start_session", "admit_turn"]
    assert all(c.session_id == session for c in survivor_calls)


async def test_holder_killed_before_start_session_returned_is_taken_over(
    replicas: ReplicaSet, handler: SqliteRunHandler,
) -> None:
    run_id, events, _ = await _takeover_after_kill(replicas, handler, "hang_start")
    assert [e.type for e in events] == ["run.created", "run.claimed",
                                        "run.session_started", "run.dispatched"]
    assert len([s for r, s in handler.sessions().items() if r == run_id]) == 1


async def test_paused_holder_writes_nothing_after_its_lease_was_taken_over(
    replicas: ReplicaSet, handler: SqliteRunHandler,
) -> None:
    a, b = await steered_pair(replicas, handler, schedule("pause"), "hang_admit")
    run_id = await fire_one(a, "pause", FAR.replace(hour=3))
    (hang,) = await eventually(lambda: hangs(handler, run_id), timeout=15)
    holder = by_identity([a, b], hang.process)
    other = b if holder is a else a
    holder.pause()
    try:
        handler.set_rule("pause", None)  # the frozen holder would go on once it wakes
        await eventually(lambda: run_id in handler.turns(), timeout=LEASE + 5)
    finally:
        holder.resume()

    async def holder_let_go() -> bool:
        return run_id not in (await holder.send("status"))["in_flight"]

    await eventually(holder_let_go, timeout=10)
    events = await history(replicas.url, replicas.prefix, "pause", run_id)
    takeover = next(i for i, e in enumerate(events)
                    if isinstance(e.event, RunClaimed) and e.event.holder == other.identity)
    assert events[takeover].event.takeover_from == holder.identity
    assert [e for e in events[takeover:] if e.event.actor == holder.identity] == []
    assert events[-1].type == "run.dispatched" and events[-1].event.actor == other.identity
    assert_one_session(handler, run_id, await dispatched_run(holder, run_id))


# --------------------------------------------------------------------------- recovery


async def test_restarted_replica_resumes_its_own_and_others_leftovers_once(
    replicas: ReplicaSet, handler: SqliteRunHandler,
) -> None:
    a, b = await steered_pair(replicas, handler, schedule("left"), "hang_admit")
    made = await asyncio.gather(*(
        r.send("enqueue", deployment="left", request_id=f"{r.identity}{i}")
        for r in (a, b) for i in range(3)))
    run_ids = {m["run"]["run_id"] for m in made}
    assert len(run_ids) == 6

    def all_hanging() -> dict[str, str] | None:
        held = {c.run_id: c.process for c in handler.calls() if c.outcome == "hang"}
        return held if set(held) == run_ids else None

    held = await eventually(all_hanging, timeout=15)
    await asyncio.gather(a.killed(), b.killed())
    handler.set_rule("left", None)

    restarted = await replicas.add("a").start()  # same identity: its own leases are its own
    await eventually(lambda: set(handler.turns()) >= run_ids, timeout=LEASE + 10)
    runs = await dispatched_runs(restarted, "left", 6)
    assert {r["run_id"] for r in runs} == run_ids  # nothing duplicated, nothing lost
    assert set(handler.sessions()) == run_ids
    for run in runs:
        assert_one_session(handler, run["run_id"], run)
        events = await history(replicas.url, replicas.prefix, "left", run["run_id"])
        last_claim = [e for e in events if isinstance(e.event, RunClaimed)][-1]
        assert last_claim.event.holder == "a"
        assert last_claim.event.takeover_from == held[run["run_id"]]
    assert {held[r] for r in run_ids} <= {"a", "b"}


async def test_run_stored_by_a_process_that_died_before_claiming_it_is_resumed(
    replicas: ReplicaSet, handler: SqliteRunHandler,
) -> None:
    a, ghost = await replicas.spawn("a", "ghost")
    await a.send("apply", schedule=schedule("orphan"))
    stored = (await ghost.send("create_unclaimed", deployment="orphan",
                               request_id="r1"))["run"]
    await ghost.killed()
    run_id = stored["run_id"]
    await eventually(lambda: run_id in handler.turns(), timeout=LEASE + 5)
    events = await history(replicas.url, replicas.prefix, "orphan", run_id)
    assert [e.type for e in events] == ["run.created", "run.claimed", "run.session_started",
                                        "run.dispatched"]
    assert events[0].event.actor == "ghost"
    assert {e.event.actor for e in events[1:]} == {"a"}
    assert_one_session(handler, run_id, await dispatched_run(a, run_id))


# --------------------------------------------------------------------------- the lease fence


async def test_holder_past_its_lease_writes_nothing_once_the_lease_was_taken(
    nats_url: str,
) -> None:
    """The window the Run's sequence alone leaves open, made deterministic in one process:
    another replica has taken the lapsed lease (its KV compare-and-set won) but has not yet
    stored its ``run.claimed``. The old holder wakes with the answer of its handler call and
    must not write it: past its expiry it re-proves the lease by CAS first, which fails."""
    prefix = unique_prefix()
    clock = ManualClock(datetime.now(UTC))
    handler = RecordingRunHandler()
    async with running(nats_url, prefix, handler, clock=clock, lease_seconds=2.0,
                       call_timeout=60.0) as provider:
        await provider.apply(Schedule("fence", "fence", "0 3 29 2 *", "UTC", True,
                                      RunPayload("t", "p"), 1))
        gate = handler.block(deployment_id="fence", method="admit_turn")
        run = await provider.fire_due("fence", FAR.replace(hour=3))
        assert run is not None
        await gate.wait_until_blocked()

        kv = provider.store.leases
        entry = await kv.get(token(run.run_id))
        thief = LeaseValue(run_id=run.run_id, holder="thief", acquired_at=clock.now(),
                           expires_at=clock.now() + timedelta(hours=1))
        await kv.update(token(run.run_id), msgspec.json.encode(thief), last=entry.revision)
        before = await history(nats_url, prefix, "fence", run.run_id)
        clock.advance(timedelta(seconds=3))  # the holder's lease lapsed on its own clock
        gate.release()  # ... and its admit_turn answers now

        await eventually(lambda: not (provider.dispatcher and provider.dispatcher.in_flight))
        after = await history(nats_url, prefix, "fence", run.run_id)
        assert [e.seq for e in after] == [e.seq for e in before]
        assert before[-1].type == "run.session_started"

"""Handlers that misbehave, and a replica whose own event loop stalls.

AstraBox's side may hang (past the call timeout, even ignoring the cancellation), raise
(transiently or for good), return garbage instead of an ID, or be slow under load; the
provider's own loop may stall for seconds (a GC pause, a starved host). Whatever happens,
each Run ends DISPATCHED or FAILED within its retry budget, with one Session, and a stalled
holder writes nothing after another replica took its Run over. Each ends with the checker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from nats_scheduler.core.events import RunClaimed
from tests.harness.checking import read_history
from tests.harness.replicas import ReplicaProcess, ReplicaSet
from tests.harness.scenario import (
    FAST_REPLICA,
    LEASE,
    assert_clean_store,
    schedule,
    steered_pair,
    wait_all_finished,
    wait_projections,
)
from tests.harness.shared_handler import SqliteRunHandler
from tests.providers import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SETTINGS: dict[str, object] = {**FAST_REPLICA, "call_timeout": 2.0, "retry_attempts": 3,
                               "max_concurrent_dispatch": 3}

RULES = {
    "hang": "hang_admit",             # never answers: each attempt times out
    "deaf": "deaf_admit",             # never answers and swallows the cancellation
    "flaky": "fail_transient:2",      # fails twice, then works
    "reject": "fail_permanent",       # RunPermanentError
    "empty": "garbage_start:empty",   # "" as a Session ID
    "none": "garbage_admit:none",     # None as a turn ID
    "int": "garbage_start:int",       # 42 as a Session ID
    "slow": "slow_admit:1.5",         # slower than a lease renewal, under load
}
FINAL = {"hang": "failed", "deaf": "failed", "flaky": "dispatched", "reject": "failed",
         "empty": "failed", "none": "failed", "int": "failed", "slow": "dispatched"}


@pytest.fixture
def replica_settings() -> dict[str, object]:
    """Short call timeouts and few attempts: a misbehaving call uses its budget up fast."""
    return SETTINGS


@pytest.fixture
async def replicas(replicas: ReplicaSet) -> AsyncIterator[ReplicaSet]:
    """The shared ``replicas``, killed before their graceful stop: a deaf call would hold
    that stop up."""
    try:
        yield replicas
    finally:
        for replica in replicas.replicas:
            replica.kill()


async def runs_of(replica: ReplicaProcess, deployment: str) -> list[dict[str, object]]:
    return list((await replica.send("list_runs", deployment=deployment))["runs"])


@pytest.mark.wall_clock
async def test_misbehaving_handlers_end_every_run_within_its_budget(
    replicas: ReplicaSet, handler: SqliteRunHandler,
) -> None:
    a, b = await replicas.spawn("a", "b")
    for deployment, rule in RULES.items():
        await a.send("apply", schedule=schedule(deployment))
        handler.set_rule(deployment, rule)
    for deployment in RULES:
        count = 8 if deployment == "slow" else 1
        for i in range(count):
            await (a if i % 2 else b).send("enqueue", deployment=deployment,
                                          request_id=f"{deployment}-{i}")
    await wait_all_finished(replicas.url, replicas.prefix, timeout=60)
    for deployment, final in FINAL.items():
        runs = await runs_of(a, deployment)
        assert {r["state"] for r in runs} == {final}, (deployment, runs)
    (hung,) = await runs_of(a, "hang")
    assert "did not answer within the call timeout" in str(hung["error"])
    assert hung["attempts"] == 3
    (garbage,) = await runs_of(a, "empty")
    assert "not an ID" in str(garbage["error"])
    await wait_projections([a, b], replicas.url, replicas.prefix)
    await assert_clean_store(replicas.url, replicas.prefix, handler=handler,
                             windows=replicas.windows())


@pytest.mark.wall_clock
async def test_a_stalled_event_loop_loses_its_runs_and_writes_nothing_after(
    replicas: ReplicaSet, handler: SqliteRunHandler,
) -> None:
    a, b = await steered_pair(replicas, handler, schedule("stall"), "hang_admit")
    run_ids = [(await a.send("enqueue", deployment="stall", request_id=f"s{i}"))["run"]["run_id"]
               for i in range(3)]
    await eventually(lambda: {c.run_id for c in handler.calls() if c.outcome == "hang"}
                     >= set(run_ids), timeout=10)
    handler.set_rule("stall", None)  # the answers are there when a wakes up
    await a.stall(3 * LEASE)  # b takes the Runs over meanwhile
    await wait_all_finished(replicas.url, replicas.prefix, timeout=30)

    history = await read_history(replicas.url, replicas.prefix)
    for run_id in run_ids:
        events = [e for e in history.runs if e.event is not None
                  and e.event.run.run_id == run_id]  # type: ignore[union-attr]
        takeover = next(i for i, e in enumerate(events) if isinstance(e.event, RunClaimed)
                        and e.event.takeover_from == "a")
        assert all(e.event.actor == "b" for e in events[takeover:])  # type: ignore[union-attr]
    await wait_projections([a, b], replicas.url, replicas.prefix)
    await assert_clean_store(replicas.url, replicas.prefix, handler=handler,
                             windows=replicas.windows())

"""The functional core of a Run, without a server: transitions, evolve, retry policy."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from nats_scheduler.core import runcore
from nats_scheduler.core.events import RunRecord
from nats_scheduler.core.runcore import RetryPolicy, TransitionError
from nats_scheduler.seam import RunPayload, RunState, Trigger

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def created() -> runcore.RunCreated:
    return runcore.create(
        run_id="r1", deployment_id="d", trigger=Trigger.SCHEDULE, due_at=T0,
        payload=RunPayload("t", "p"), now=T0, actor="a",
    )


def test_happy_path_folds_to_dispatched() -> None:
    c = created()
    record = runcore.evolve(None, c)
    claim = runcore.claim(record, holder="a", now=T0 + timedelta(seconds=1))
    record = runcore.evolve(record, claim)
    assert record.state == RunState.DISPATCHING and record.attempts == 1
    s = runcore.session_started(record, session_id="s1", now=T0, actor="a")
    record = runcore.evolve(record, s)
    d = runcore.dispatched(record, turn_id="t1", now=T0, actor="a")
    record = runcore.evolve(record, d)
    assert (record.state, record.session_id, record.turn_id, record.holder) == (
        RunState.DISPATCHED, "s1", "t1", None)


def test_retry_then_takeover_keeps_session_and_counts_attempts() -> None:
    record = created().run
    record = runcore.claim(record, holder="a", now=T0).run
    record = runcore.session_started(record, session_id="s1", now=T0, actor="a").run
    record = runcore.attempt_failed(record, error="x", retry_at=T0 + timedelta(seconds=2),
                                    now=T0, actor="a").run
    assert record.state == RunState.PENDING and record.retry_at is not None
    taken = runcore.claim(record, holder="b", now=T0 + timedelta(seconds=3))
    assert taken.run.session_id == "s1" and taken.run.attempts == 2
    assert runcore.invocation(taken.run).session_id == "s1"
    assert runcore.invocation(taken.run).attempt == 2
    # a takeover of a DISPATCHING Run names the previous holder
    takeover = runcore.claim(taken.run, holder="c", now=T0)
    assert takeover.takeover_from == "b"


def test_finished_runs_refuse_further_events() -> None:
    record = runcore.claim(created().run, holder="a", now=T0).run
    done = runcore.dispatched(record, turn_id="t", now=T0, actor="a").run
    with pytest.raises(TransitionError):
        runcore.claim(done, holder="b", now=T0)
    failed = runcore.failed(record, error="e", now=T0, actor="a").run
    with pytest.raises(TransitionError):
        runcore.session_started(failed, session_id="s", now=T0, actor="a")


def test_evolve_rejects_gaps_and_forged_state() -> None:
    c = created()
    with pytest.raises(TransitionError):
        runcore.evolve(c.run, c)  # created twice
    claim = runcore.claim(c.run, holder="a", now=T0)
    with pytest.raises(TransitionError):
        runcore.evolve(None, claim)  # before created
    forged = msgspec.structs.replace(claim, run=msgspec.structs.replace(claim.run, attempts=5))
    with pytest.raises(TransitionError):
        runcore.evolve(c.run, forged)


def test_retry_policy_is_bounded_exponential_with_jitter() -> None:
    policy = RetryPolicy(attempts=8, initial=1.0, cap=60.0)
    rng = random.Random(7)
    delays = [policy.delay(n, rng) for n in range(1, 10)]
    for n, d in enumerate(delays, start=1):
        nominal = min(60.0, 2 ** (n - 1))
        assert nominal / 2 <= d <= nominal
    record = msgspec.structs.replace(created().run, attempts=8)
    assert policy.exhausted(record, T0, 1.0)
    assert not policy.exhausted(msgspec.structs.replace(record, attempts=7), T0, 1.0)


def test_retry_policy_total_time_budget() -> None:
    policy = RetryPolicy(attempts=100, initial=1.0, cap=60.0, total=10.0)
    record: RunRecord = msgspec.structs.replace(created().run, attempts=2, first_attempt_at=T0)
    assert not policy.exhausted(record, T0 + timedelta(seconds=5), 4.0)
    assert policy.exhausted(record, T0 + timedelta(seconds=8), 4.0)


def test_failure_description_is_short_and_neutral() -> None:
    text = runcore.describe_failure(ConnectionError("backend down\nmore lines"))
    assert text == "handler call failed (ConnectionError): backend down"
    assert "call timeout" in runcore.describe_failure(TimeoutError(), timed_out=True)


def claimed_create(holder: str = "a") -> runcore.RunCreated:
    return runcore.create(
        run_id="r1", deployment_id="d", trigger=Trigger.SCHEDULE, due_at=T0,
        payload=RunPayload("t", "p"), now=T0, actor=holder, holder=holder,
    )


def test_a_create_carrying_its_claim_starts_at_the_claimed_state() -> None:
    c = claimed_create()
    record = runcore.evolve(None, c)
    assert (record.state, record.holder, record.attempts, record.first_attempt_at) == (
        RunState.DISPATCHING, "a", 1, T0)
    assert c.holder == "a" and runcore.claimed_at_create(record)
    # the same trail as after created + claimed: a session, then the turn
    s = runcore.session_started(record, session_id="s1", now=T0 + timedelta(seconds=1),
                                actor="a")
    record = runcore.evolve(record, s)
    assert not runcore.claimed_at_create(record)
    record = runcore.evolve(record, runcore.dispatched(record, turn_id="t1", now=T0, actor="a"))
    assert record.state == RunState.DISPATCHED
    # a takeover of a claimed create names the creator it took over from
    takeover = runcore.claim(runcore.evolve(None, c), holder="b", now=T0 + timedelta(seconds=9))
    assert takeover.takeover_from == "a" and takeover.run.attempts == 2


def test_a_create_whose_state_does_not_follow_from_its_claim_is_rejected() -> None:
    c = claimed_create()
    no_claim = msgspec.structs.replace(c, holder=None)
    other_holder = msgspec.structs.replace(c, holder="b")
    pending_but_claimed = msgspec.structs.replace(
        created(), holder="a")
    for forged in (no_claim, other_holder, pending_but_claimed):
        with pytest.raises(TransitionError):
            runcore.evolve(None, forged)

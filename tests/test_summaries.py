"""The deployment summaries the views read: the newest Run, the newest scheduled Run and the
day's FAILED Runs, kept packed (nats_scheduler/projections/summaries.py), and the ledger's
warm-up that feeds them without filling the recently touched Runs."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

from nats_scheduler.core.events import RunRecord
from nats_scheduler.names import scheduled_run_id
from nats_scheduler.projections.ledger import Ledger
from nats_scheduler.projections.summaries import FAILURE_MEMORY, Summaries
from nats_scheduler.seam import RunPayload, RunState, Trigger

T0 = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)


def run(run_id: str, *, created: datetime, dep: str = "dep", scheduled: bool = False,
        state: RunState = RunState.DISPATCHED, updated: datetime | None = None) -> RunRecord:
    return RunRecord(
        run_id=run_id, deployment_id=dep,
        trigger=Trigger.SCHEDULE if scheduled else Trigger.RUN_NOW,
        due_at=created if scheduled else None, created_at=created,
        updated_at=updated or created, state=state, payload=RunPayload("t", "p"))


def test_the_newest_run_and_the_newest_scheduled_run_are_each_kept() -> None:
    summaries = Summaries()
    fired = run(scheduled_run_id("dep", T0), created=T0, scheduled=True)
    summaries.note(10, fired)
    summary = summaries.summary("dep")
    assert summary.last == summary.last_scheduled
    assert summary.last is not None and summary.last.run_id == fired.run_id
    assert summary.last.due_at == T0 and summary.last.state == RunState.DISPATCHED

    # a Run now after it: the newest Run, while the fired one stays the newest scheduled
    summaries.note(11, run("now-1", created=T0 + timedelta(minutes=1)))
    summary = summaries.summary("dep")
    assert summary.last is not None and summary.last.run_id == "now-1"
    assert summary.last.due_at is None and summary.last.trigger == Trigger.RUN_NOW
    assert summary.last_scheduled is not None and summary.last_scheduled.run_id == fired.run_id

    # an older scheduled Run read late changes neither; a newer one takes both places
    summaries.note(3, run(scheduled_run_id("dep", T0 - timedelta(hours=1)),
                          created=T0 - timedelta(hours=1), scheduled=True))
    assert summaries.summary("dep").last_scheduled.run_id == fired.run_id  # type: ignore[union-attr]
    later = run(scheduled_run_id("dep", T0 + timedelta(hours=1)),
                created=T0 + timedelta(hours=1), scheduled=True)
    summaries.note(12, later)
    summary = summaries.summary("dep")
    assert summary.last == summary.last_scheduled
    assert summary.last is not None and summary.last.run_id == later.run_id


def test_a_runs_newer_state_replaces_its_older_one_and_never_the_reverse() -> None:
    summaries = Summaries()
    pending = run("r", created=T0, state=RunState.PENDING)
    done = run("r", created=T0, state=RunState.DISPATCHED, updated=T0 + timedelta(seconds=2))
    summaries.note(5, done)
    summaries.note(4, pending)  # read late (the warm-up after the follower): older
    assert summaries.summary("dep").last.state == RunState.DISPATCHED  # type: ignore[union-attr]
    summaries.note(6, run("r", created=T0, state=RunState.FAILED))
    assert summaries.summary("dep").last.state == RunState.FAILED  # type: ignore[union-attr]


def test_failures_are_kept_per_deployment_and_forgotten_after_a_day() -> None:
    summaries = Summaries()
    summaries.note(1, run("old", created=T0 - FAILURE_MEMORY - timedelta(hours=2),
                          state=RunState.FAILED))
    summaries.note(2, run("new", created=T0 - timedelta(hours=1), state=RunState.FAILED))
    summaries.note(3, run("other", dep="b", created=T0, state=RunState.FAILED))
    assert {r.run_id for r in summaries.failures(T0 - timedelta(hours=24))} == {"new", "other"}
    assert [r.run_id for r in summaries.failures(T0 - timedelta(hours=24), "dep")] == ["new"]
    assert set(summaries.summary("dep").failures) == {"old", "new"}
    assert [r.run_id for r in summaries.failures(T0)] == ["other"]  # and "old" is now...
    assert set(summaries.summary("dep").failures) == {"new"}  # ... forgotten on the way
    assert summaries.failures(T0, "none") == []


def test_a_deployments_summary_costs_about_a_hundred_bytes() -> None:
    """The budget that holds 100,000 Schedules in 150 MB (docs/benchmarks.md): the packed
    newest Run of a deployment, a scheduled one (the usual case), is one small bytes object."""
    summaries = Summaries()
    for i in range(1_000):
        dep = f"deployment-{i:06d}"
        summaries.note(i + 1, run(scheduled_run_id(dep, T0), dep=dep, created=T0,
                                  scheduled=True))
    packed = [summaries._last[f"deployment-{i:06d}"] for i in range(1_000)]
    assert not summaries._last_scheduled  # a scheduled newest Run is not stored twice
    assert max(sys.getsizeof(p) for p in packed) <= 120


def test_the_warm_up_feeds_summaries_not_the_recently_touched_runs() -> None:
    ledger = Ledger()
    finished = run("done", created=T0)
    waiting = run("open", created=T0, state=RunState.PENDING)
    assert ledger.apply_history(7, finished)
    assert ledger.apply_history(8, waiting)
    assert ledger.get("done") is None  # only in its deployment's summary
    assert ledger.summary("dep").last is not None
    assert [r.run_id for r in ledger.unfinished()] == ["open"]  # the sweep's work list
    assert ledger.unfinished_count() == 1
    # a Run this process holds takes a newer state from the history, never an older one
    assert not ledger.apply_history(8, waiting)
    assert ledger.apply_history(9, run("open", created=T0, state=RunState.DISPATCHED))
    assert ledger.unfinished() == [] and ledger.get("open") is not None
    assert ledger.unfinished_count() == 0

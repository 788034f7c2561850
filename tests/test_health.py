"""Health signals (silent stop, stuck, failed) and admin views, computed without a server."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from nats_scheduler.admin.api import AdminError, ErrorCode
from nats_scheduler.admin.health import (
    HealthPolicy,
    build_health,
    failed_runs,
    is_stuck,
    latest_expected_due,
    silent_stops,
)
from nats_scheduler.admin.views import (
    probe_limit,
    run_list,
    schedule_state,
    schedule_view,
    schedule_views,
)
from nats_scheduler.core.events import Hold, RunRecord, ScheduleRecord
from nats_scheduler.names import scheduled_run_id
from nats_scheduler.projections.ledger import Ledger
from nats_scheduler.projections.reads import merge
from nats_scheduler.seam import RunPayload, RunState, Trigger

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
GRACE = timedelta(seconds=60)


def schedule(dep: str = "dep", cron: str = "*/5 * * * *", *, updated: datetime = T0,
             enabled: bool = True, held: bool = False, deleted: bool = False,
             timezone: str = "UTC") -> ScheduleRecord:
    return ScheduleRecord(
        deployment_id=dep, name=dep.upper(), cron=cron, timezone=timezone, enabled=enabled,
        payload=RunPayload("t", "p"), version=1, deleted=deleted,
        hold=Hold(by="ops", reason="why", at=updated) if held else None, updated_at=updated)


def run(run_id: str, *, dep: str = "dep", state: RunState = RunState.DISPATCHED,
        created: datetime = T0, updated: datetime | None = None, due: datetime | None = None,
        retry_at: datetime | None = None) -> RunRecord:
    return RunRecord(
        run_id=run_id, deployment_id=dep,
        trigger=Trigger.SCHEDULE if due else Trigger.RUN_NOW, due_at=due, created_at=created,
        updated_at=updated or created, state=state, payload=RunPayload("t", "p"),
        retry_at=retry_at)


# ----------------------------------------------------------------------------- silent stop


def test_latest_expected_due_is_the_last_due_time_older_than_the_grace() -> None:
    record = schedule(updated=T0)
    now = T0 + timedelta(minutes=12, seconds=30)
    assert latest_expected_due(record, now, GRACE) == T0 + timedelta(minutes=10)
    # the 12:10 due time is only 30 s old with a 5-minute grace: 12:05 is the one expected
    assert latest_expected_due(record, now, timedelta(minutes=5)) == T0 + timedelta(minutes=5)


def test_nothing_is_expected_before_the_schedule_existed_or_while_inactive() -> None:
    now = T0 + timedelta(minutes=3)
    assert latest_expected_due(schedule(updated=T0), now, GRACE) is None
    for inactive in (schedule(enabled=False), schedule(held=True), schedule(deleted=True)):
        assert latest_expected_due(inactive, T0 + timedelta(hours=5), GRACE) is None


def test_a_yearly_schedule_finds_its_due_time_months_back() -> None:
    record = schedule(cron="0 0 1 1 *", updated=datetime(2025, 6, 1, tzinfo=UTC))
    now = datetime(2026, 3, 1, tzinfo=UTC)
    assert latest_expected_due(record, now, GRACE) == datetime(2026, 1, 1, tzinfo=UTC)


def test_silent_stop_when_the_latest_due_time_has_no_run() -> None:
    records = [schedule("fired"), schedule("silent"), schedule("quiet", enabled=False)]
    now = T0 + timedelta(minutes=7)
    due = T0 + timedelta(minutes=5)
    runs = {("fired", due)}
    assert silent_stops(records, lambda d, at: (d, at) in runs, now, GRACE) == ["silent"]


def test_only_the_latest_due_time_counts_no_backfill() -> None:
    # 12:05 was missed (an outage) but 12:10 fired: not a silent stop any more
    record = schedule("dep")
    now = T0 + timedelta(minutes=11, seconds=30)
    runs = {T0 + timedelta(minutes=10)}
    assert silent_stops([record], lambda _d, at: at in runs, now, GRACE) == []


# ----------------------------------------------------------------------------- stuck


def test_a_run_under_a_live_lease_is_not_stuck_however_old() -> None:
    old = run("r", state=RunState.DISPATCHING, created=T0)
    now = T0 + timedelta(hours=1)
    assert not is_stuck(old, now + timedelta(seconds=3), now, timedelta(seconds=10))


def test_unmoved_runs_without_a_lease_are_stuck_after_the_threshold() -> None:
    pending = run("r", state=RunState.PENDING, created=T0)
    after = timedelta(seconds=10)
    assert not is_stuck(pending, None, T0 + timedelta(seconds=9), after)
    assert is_stuck(pending, None, T0 + timedelta(seconds=11), after)
    # an expired lease counts from its expiry
    assert not is_stuck(pending, T0 + timedelta(seconds=5), T0 + timedelta(seconds=12), after)
    assert is_stuck(pending, T0 + timedelta(seconds=5), T0 + timedelta(seconds=16), after)


def test_a_run_waiting_for_its_retry_is_not_stuck_before_the_retry_time() -> None:
    waiting = run("r", state=RunState.PENDING, created=T0,
                  retry_at=T0 + timedelta(minutes=1))
    after = timedelta(seconds=10)
    assert not is_stuck(waiting, None, T0 + timedelta(seconds=65), after)
    assert is_stuck(waiting, None, T0 + timedelta(seconds=71), after)


def test_finished_runs_are_never_stuck() -> None:
    for state in (RunState.DISPATCHED, RunState.FAILED):
        assert not is_stuck(run("r", state=state), None, T0 + timedelta(days=1),
                            timedelta(seconds=1))


# ----------------------------------------------------------------------------- failed


def test_failed_runs_within_the_window_newest_first() -> None:
    records = [
        run("old", state=RunState.FAILED, created=T0 - timedelta(hours=30)),
        run("a", state=RunState.FAILED, created=T0 - timedelta(hours=3)),
        run("b", state=RunState.FAILED, created=T0 - timedelta(hours=1)),
        run("ok", state=RunState.DISPATCHED, created=T0 - timedelta(hours=1)),
    ]
    assert [r.run_id for r in failed_runs(records, T0, timedelta(hours=24))] == ["b", "a"]


def test_build_health_combines_the_three_signals() -> None:
    now = T0 + timedelta(minutes=12)
    ledger = Ledger()
    due = T0 + timedelta(minutes=10)
    ledger.apply(1, run(scheduled_run_id("fired", due), dep="fired", due=due, created=due))
    ledger.apply(2, run("stuck", dep="fired", state=RunState.PENDING, created=T0))
    ledger.apply(3, run("failed", dep="fired", state=RunState.FAILED, created=T0))
    health = build_health([schedule("fired"), schedule("silent")], ledger, {}, now,
                           HealthPolicy(lease_seconds=5.0))
    assert health.silent_stops == ["silent"]
    assert [r.run_id for r in health.stuck_runs] == ["stuck"]
    assert [r.run_id for r in health.failed_runs] == ["failed"]
    # a live lease clears the stuck signal
    health = build_health([], ledger, {"stuck": now + timedelta(seconds=1)}, now)
    assert health.stuck_runs == []


# ----------------------------------------------------------------------------- views


def test_schedule_state_precedence() -> None:
    assert schedule_state(schedule()) == "enabled"
    assert schedule_state(schedule(enabled=False)) == "disabled"
    assert schedule_state(schedule(enabled=False, held=True)) == "held"
    assert schedule_state(schedule(held=True, deleted=True)) == "deleted"


def test_schedule_view_shows_next_due_times_last_run_and_failures() -> None:
    ledger = Ledger()
    ledger.apply(1, run("f1", state=RunState.FAILED, created=T0 - timedelta(hours=2)))
    ledger.apply(2, run("last", created=T0 - timedelta(minutes=1)))
    view = schedule_view(schedule(cron="0 * * * *"), ledger, T0 + timedelta(seconds=1))
    assert view.next_due == [T0 + timedelta(hours=h) for h in (1, 2, 3)]
    assert view.last_run_state == RunState.DISPATCHED
    assert view.failures_24h == 1
    assert schedule_view(schedule(held=True), ledger, T0).next_due == []
    # the view is plain JSON
    assert msgspec.json.decode(msgspec.json.encode(view))["state"] == "enabled"


def test_schedule_views_filter_is_a_case_insensitive_substring_of_id_or_name() -> None:
    records = [schedule("berlin-daily"), schedule("tokyo"), schedule("gone", deleted=True)]
    ids = [v.deployment_id for v in schedule_views(records, Ledger(), T0, filter="BERLIN")]
    assert ids == ["berlin-daily"]
    assert [v.deployment_id for v in schedule_views(records, Ledger(), T0, filter="TOK")] == [
        "tokyo"]  # name is the upper-case ID
    assert len(schedule_views(records, Ledger(), T0)) == 2
    assert len(schedule_views(records, Ledger(), T0, include_deleted=True)) == 3


def test_run_list_continues_only_when_the_probe_found_more() -> None:
    runs = [run(f"r{i}", created=T0 + timedelta(seconds=i)) for i in range(5)][::-1]
    assert probe_limit(2) == 3 and probe_limit(1000) == 1000
    first = run_list(runs[:3], 2)  # a probe of 3 found 3: there is more
    assert [r.run_id for r in first.runs] == ["r4", "r3"] and first.next_before == "r3"
    last = run_list(runs[3:], 2)  # a probe of 3 found 2: this is the end
    assert [r.run_id for r in last.runs] == ["r1", "r0"] and last.next_before is None
    with pytest.raises(AdminError) as bad:
        probe_limit(0)
    assert bad.value.code == ErrorCode.INVALID_REQUEST


def test_a_page_merges_what_this_process_wrote_a_moment_ago() -> None:
    older = run("old", created=T0)
    stale = run("mine", created=T0 + timedelta(seconds=1), state=RunState.PENDING)
    fresh = msgspec.structs.replace(stale, state=RunState.DISPATCHED,
                                    updated_at=T0 + timedelta(seconds=5))
    new = run("new", created=T0 + timedelta(seconds=2), state=RunState.PENDING)
    # The history (a lagging follower) has "mine" still PENDING and not yet "new".
    page = merge([stale, older], [fresh, new], limit=3, cursor=None, now=T0)
    assert [(r.run_id, r.state) for r in page] == [
        ("new", RunState.PENDING), ("mine", RunState.DISPATCHED), ("old", RunState.DISPATCHED)]
    # A full page keeps its range: a known Run older than its last belongs to a later page.
    assert [r.run_id for r in merge([new, fresh], [older], limit=2, cursor=None, now=T0)] == [
        "new", "mine"]
    # Nothing at or after the cursor.
    assert [r.run_id for r in merge([older], [new, fresh], limit=5, cursor=fresh,
                                    now=T0)] == ["old"]
    # A finished Run the history no longer has (past retention) does not come back.
    assert merge([], [older], limit=5, cursor=None, now=T0 + timedelta(hours=1)) == []

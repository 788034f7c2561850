"""The account of due times, pure: the calendar as it stood, one outcome per due time.

No server: Schedule changes, Runs and outages are built by hand with the server times the
store would give them, and ``now`` is passed in. The paging is property-based: pages of any
size, read one after the other, list exactly the due times of every definition in force,
each once, newest first.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from nats_scheduler.core import calendar
from nats_scheduler.core.due_words import describe
from nats_scheduler.core.dueaccount import (
    Change,
    Outage,
    Outcome,
    Reason,
    account,
    due_times_before,
    judge,
    refused_change,
    spans,
)
from nats_scheduler.core.events import Hold, RunRecord, ScheduleRecord
from nats_scheduler.core.liveness import LastRecord, Peer, Sign, outage_before, skipped_during
from nats_scheduler.core.refusals import Refusal, RefusalKind
from nats_scheduler.seam import RunPayload, RunState, Trigger

T0 = datetime(2030, 1, 1, 2, 0, 30, tzinfo=UTC)
"""The Schedule's first change: 30 s past a minute."""


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def record(cron: str = "* * * * *", *, enabled: bool = True, hold: Hold | None = None,
           deleted: bool = False, version: int = 1, zone: str = "UTC") -> ScheduleRecord:
    return ScheduleRecord(deployment_id="dep", name="Dep", cron=cron, timezone=zone,
                          enabled=enabled, payload=RunPayload("t", "p"), version=version,
                          hold=hold, deleted=deleted, updated_at=T0)


def run_at(due: datetime, *, state: RunState = RunState.DISPATCHED, late: float = 0.2,
           error: str | None = None) -> RunRecord:
    return RunRecord(run_id=f"s-{due:%H%M}", deployment_id="dep", trigger=Trigger.SCHEDULE,
                     due_at=due, created_at=due + timedelta(seconds=late),
                     updated_at=due + timedelta(seconds=late), state=state,
                     payload=RunPayload("t", "p"), first_attempt_at=due + timedelta(seconds=late),
                     error=error)


def whole(changes: list[Change], *, runs: dict[datetime, RunRecord] | None = None,
          outages: list[Outage] | None = None, since: datetime = T0,
          until: datetime | None = None, now: datetime | None = None) -> list:
    """Every line of the account in one page, newest first."""
    calendar_spans = spans(changes)
    until = until or at(10)
    dues = due_times_before(calendar_spans, since=since, until=until)
    return account(calendar_spans, runs or {}, outages or [], since=since, until=until,
                   now=now or until + timedelta(hours=1), dues=dues, limit=None).due_times


def by_due(lines: list) -> dict[datetime, object]:
    return {line.due_at: line for line in lines}


# ----------------------------------------------------------------------------- outcomes


def test_each_due_time_with_its_run_or_reason() -> None:
    held = Hold(by="ana@ops", reason="db migration", at=at(3))
    changes = [Change(T0, record()),
               Change(at(2), record(enabled=False, version=2)),   # disabled 02:02:30
               Change(at(3), record(enabled=True, version=3, hold=held)),  # and held at once
               Change(at(5), record(version=3))]                   # released 02:05:30
    runs = {d: run_at(d) for d in (at(0.5), at(1.5), at(5.5))}
    runs[at(8.5)] = run_at(at(8.5), state=RunState.FAILED, error="the handler refused")
    outage = Outage(at(6.6), at(7.7), "the last Run event")
    newest_first = whole(changes, runs=runs, outages=[outage], until=at(9))
    lines = by_due(newest_first)
    assert [(f"{line.due_at:%H:%M}", line.outcome, line.reason) for line in newest_first] == [
        ("02:09", Outcome.RUN, None), ("02:08", Outcome.SKIPPED, Reason.NO_PROCESS),
        ("02:07", Outcome.UNEXPLAINED, None), ("02:06", Outcome.RUN, None),
        ("02:05", Outcome.SKIPPED, Reason.HELD), ("02:04", Outcome.SKIPPED, Reason.HELD),
        ("02:03", Outcome.SKIPPED, Reason.DISABLED), ("02:02", Outcome.RUN, None),
        ("02:01", Outcome.RUN, None)]
    disabled = lines[at(2.5)]
    assert (disabled.reason, disabled.since, disabled.until, disabled.version) == (
        Reason.DISABLED, at(2), at(3), 2)
    hold = lines[at(3.5)]
    assert (hold.reason, hold.by, hold.note, hold.since, hold.until) == (
        Reason.HELD, "ana@ops", "db migration", at(3), at(5))
    assert describe(hold) == "skipped: held by ana@ops, 'db migration', 02:03-02:05"
    gone = lines[at(7.5)]
    assert (gone.reason, gone.since, gone.until) == (Reason.NO_PROCESS, at(6.6), at(7.7))
    assert lines[at(6.5)].outcome == Outcome.UNEXPLAINED  # before the outage began
    failed = lines[at(8.5)]
    assert (failed.state, failed.error, failed.late_seconds) == (
        RunState.FAILED, "the handler refused", 0.2)
    assert lines[at(0.5)].run_id == "s-0201"


def test_a_cron_edit_changes_the_account_from_its_commit_on() -> None:
    edit = T0 + timedelta(minutes=3, seconds=10)  # 02:03:40
    changes = [Change(T0, record()), Change(edit, record("*/2 * * * *", version=2))]
    dues = [line.due_at for line in whole(changes, until=at(8))]
    old = calendar.due_times("* * * * *", "UTC", T0, edit)
    new = calendar.due_times("*/2 * * * *", "UTC", edit, at(8) + timedelta(microseconds=1))
    assert dues == sorted(old + new, reverse=True)
    assert all(d.minute % 2 == 0 for d in dues if d > edit)
    assert {line.cron for line in whole(changes, until=at(8)) if line.due_at > edit} == {
        "*/2 * * * *"}


def test_pending_within_the_grace_unexplained_after_it() -> None:
    changes = [Change(T0, record())]
    due = at(0.5)
    early = judge(due, spans(changes), 0, None, [], now=due + timedelta(seconds=59))
    late = judge(due, spans(changes), 0, None, [], now=due + timedelta(seconds=61))
    assert (early.outcome, late.outcome) == (Outcome.PENDING, Outcome.UNEXPLAINED)


def test_a_due_time_still_to_come_is_pending_whatever_holds_now() -> None:
    """A hold or a disable in force now may end before a due time still to come: the
    account decides nothing about it yet (it was 'skipped: held' before)."""
    held = Hold(by="ana@ops", reason="freeze", at=T0)
    for now_record in (record(hold=held), record(enabled=False, version=2)):
        changes = [Change(T0, now_record)]
        due = at(5.5)
        ahead = judge(due, spans(changes), 0, None, [], now=at(2))
        past = judge(due, spans(changes), 0, None, [], now=at(7))
        assert (ahead.outcome, ahead.reason) == (Outcome.PENDING, None)
        assert past.outcome == Outcome.SKIPPED


def test_an_ongoing_outage_and_a_deleted_schedule() -> None:
    changes = [Change(T0, record()), Change(at(4), record(deleted=True))]
    lines = whole(changes, outages=[Outage(at(1), None, "no scheduler process is running now")],
                  until=at(9))
    assert [line.due_at for line in lines] == [at(3.5), at(2.5), at(1.5), at(0.5)]
    assert [line.reason for line in lines[:3]] == [Reason.NO_PROCESS] * 3
    assert describe(lines[0]).startswith("skipped: no scheduler process was running, since 02:01")


def test_a_change_moments_before_or_after_a_due_time() -> None:
    due = at(1.5)  # 02:02:00
    # enabled 0.5 s before the due time: replicas plan it from when they learn of it
    enabled = [Change(T0, record(enabled=False)),
               Change(due - timedelta(seconds=0.5), record(version=2))]
    line = by_due(whole(enabled))[due]
    assert (line.outcome, line.reason) == (Outcome.SKIPPED, Reason.SCHEDULE_CHANGE)
    # an edit that keeps the calendar (the prompt) changes nothing: still a broken promise
    same = [Change(T0, record()), Change(due - timedelta(seconds=0.5), record(version=2))]
    assert by_due(whole(same))[due].outcome == Outcome.UNEXPLAINED
    # held 0.3 s after the due time, before any replica fired it
    held = Hold(by="bo", reason="stop", at=due)
    after = [Change(T0, record()), Change(due + timedelta(seconds=0.3), record(hold=held))]
    line = by_due(whole(after))[due]
    assert (line.reason, line.by, line.since) == (Reason.HELD, "bo", due + timedelta(seconds=0.3))
    deleted = [Change(T0, record()), Change(due + timedelta(seconds=0.3), record(deleted=True))]
    assert by_due(whole(deleted))[due].reason == Reason.DELETED
    edited = [Change(T0, record()), Change(due + timedelta(seconds=0.3), record("5 * * * *"))]
    line = by_due(whole(edited))[due]
    assert (line.reason, describe(line)) == (
        Reason.SCHEDULE_CHANGE, "skipped: the schedule changed 0.3 s after the due time, "
                                "before it fired")


def refusal(*, enabled: bool = True, cron: str | None = "* * * * *") -> Refusal:
    return Refusal(deployment_id="dep", kind=RefusalKind.CAPACITY.value, reason="no room",
                   at=at(2), by="replica-1", cron=cron, timezone="UTC", enabled=enabled)


def test_a_refusal_marks_the_due_times_it_took_away_and_no_others() -> None:
    """From the refusal on: a deployment with nothing stored has the refused calendar, every
    due time ``refused``; a stored one disabled where AstraBox's is enabled is ``refused``;
    a stored one that fires keeps its Runs and its unexplained due times, and a hold stays
    a hold (it would outlive the apply). Before the refusal, nothing changes."""
    runs = {at(3.5): run_at(at(3.5))}

    def lines(changes: list[Change], refused: Refusal) -> dict[datetime, object]:
        extra = refused_change(changes, refused)
        return by_due(whole([*changes, *([extra] if extra else [])], runs=runs,
                            until=at(5)))

    never = lines([], refusal())
    assert sorted(never) == [at(2.5), at(3.5), at(4.5)]
    assert [(line.outcome, line.reason, line.by, line.note) for line in never.values()] == [
        (Outcome.SKIPPED, Reason.REFUSED, "replica-1", "no room"), (Outcome.RUN, None, None,
        None), (Outcome.SKIPPED, Reason.REFUSED, "replica-1", "no room")]
    assert describe(never[at(2.5)]) == "skipped: refused by replica-1, since 02:02: no room"
    assert lines([], refusal(cron=None)) == {}  # no calendar to show: the note says why
    off = lines([Change(T0, record(enabled=False))], refusal())
    assert [off[at(m)].reason for m in (0.5, 1.5, 2.5, 4.5)] == [
        Reason.DISABLED, Reason.DISABLED, Reason.REFUSED, Reason.REFUSED]
    assert lines([Change(T0, record(enabled=False))], refusal(enabled=False))[
        at(4.5)].reason == Reason.DISABLED
    fires = lines([Change(T0, record())], refusal())
    assert {line.reason for line in fires.values()} == {None}
    held = Hold(by="ana@ops", reason="freeze", at=at(3))
    kept = lines([Change(T0, record(enabled=False)),
                  Change(at(3), record(enabled=False, hold=held)),
                  Change(at(4), record(enabled=False))], refusal())  # held, then released
    assert [kept[at(m)].reason for m in (2.5, 4.5)] == [Reason.REFUSED, Reason.REFUSED]
    held_off = lines([Change(T0, record(enabled=False, hold=held))], refusal())
    assert (held_off[at(4.5)].reason, held_off[at(4.5)].by) == (Reason.HELD, "ana@ops")
    assert lines([Change(T0, record(hold=held))], refusal())[at(4.5)].reason == Reason.HELD
    gone = lines([Change(T0, record()), Change(at(1), record(deleted=True))], refusal())
    assert [gone[at(m)].reason for m in (0.5, 2.5, 4.5)] == [
        Reason.DELETED, Reason.REFUSED, Reason.REFUSED]


def test_a_run_stored_while_paused_is_a_run() -> None:
    changes = [Change(T0, record()), Change(at(1), record(enabled=False))]
    due = at(1.5)
    refused = run_at(due, state=RunState.FAILED, error="not started: the schedule was paused")
    line = by_due(whole(changes, runs={due: refused}))[due]
    assert (line.outcome, line.state) == (Outcome.RUN, RunState.FAILED)


# ----------------------------------------------------------------------------- paging

CRONS = ("* * * * *", "*/7 * * * *", "0 * * * *", "30 2 * * *", "15,45 */3 * * *")


@st.composite
def histories(draw: st.DrawFn) -> list[Change]:
    count = draw(st.integers(1, 5))
    offsets = sorted(draw(st.lists(st.integers(0, 3 * 24 * 60), min_size=count,
                                   max_size=count, unique=True)))
    changes = []
    for offset in offsets:
        changes.append(Change(
            T0 + timedelta(minutes=offset, seconds=draw(st.integers(0, 59))),
            record(draw(st.sampled_from(CRONS)), enabled=draw(st.booleans()),
                   deleted=draw(st.integers(0, 5)) == 0,
                   zone=draw(st.sampled_from(("UTC", "Europe/Berlin", "America/New_York"))))))
    return changes


@settings(max_examples=60, deadline=None, derandomize=True)
@given(histories(), st.integers(1, 400), st.integers(0, 4 * 24 * 60),
       st.integers(0, 4 * 24 * 60))
def test_pages_list_every_due_time_of_the_calendar_in_force_once(
        changes: list[Change], limit: int, a: int, b: int) -> None:
    since, until = sorted((T0 + timedelta(minutes=a), T0 + timedelta(minutes=b)))
    calendar_spans = spans(changes)
    expected = []
    for span in calendar_spans:  # the oracle: each definition over its own stretch
        if span.record.deleted:
            continue
        hi = until if span.end is None else min(until, span.end)
        for due in calendar.due_times(span.record.cron, span.record.timezone,
                                      span.start, hi + timedelta(microseconds=1)):
            if since <= due:
                expected.append(due)
    expected.sort(reverse=True)
    seen, before = [], None
    while True:
        dues = due_times_before(calendar_spans, since=since, until=until, before=before,
                                limit=limit + 1)
        page = account(calendar_spans, {}, [], since=since, until=until, now=until,
                       dues=dues, limit=limit)
        assert len(page.due_times) <= limit
        seen += [line.due_at for line in page.due_times]
        if page.next_before is None:
            assert page.lowest == since
            break
        assert page.next_before == page.due_times[-1].due_at == page.lowest
        before = page.next_before
    assert seen == expected


# ----------------------------------------------------------------------------- outages


def test_a_start_after_every_replica_stopped_ends_an_outage() -> None:
    began = at(5)
    signs = [Sign(at(1), "the last Run event"), Sign(at(2), "the last replica beat or leave"),
             Sign(at(5.01), "the last lease write")]  # stored after the start: not a sign
    gone = outage_before(began, signs, [Peer("old", at(2), True, None)], None)
    assert gone == Outage(at(2), began, "the last replica beat or leave")


def test_no_outage_while_another_replica_ran_across_the_start() -> None:
    began = at(5)
    signs = [Sign(at(4.99), "the last Run event")]
    running = Peer("b", at(5.05), False, started_at=at(1))
    assert outage_before(began, signs, [running], None) is None
    leaving = Peer("b", at(5.02), True, None)
    assert outage_before(began, signs, [leaving], None) is None
    # a replica that joined after this one's start did not cover it
    newcomer = Peer("c", at(5.05), False, started_at=at(5.01))
    assert outage_before(began, signs, [newcomer], None) == Outage(
        at(4.99), began, "the last Run event")
    # a record stored after this start by a replica that started before it
    earlier = LastRecord(at(3), at(4.9), stored_at=at(5.1))
    assert outage_before(began, signs, [], earlier) is None
    # nothing ever stored: a new store
    assert outage_before(began, [], [], None) is None


def test_an_outage_recorded_by_a_replica_starting_with_this_one_is_not_recorded_twice() -> None:
    began = at(5)
    signs = [Sign(at(1), "the last Run event")]
    theirs = LastRecord(at(1), at(4.999), stored_at=at(4.999) + timedelta(seconds=4))
    # stored after our start: it covers us (they started first and ran across our start)
    assert outage_before(began, signs, [], theirs) is None
    # they started after us and recorded first: the same outage, once
    later = LastRecord(at(1), at(5.001), stored_at=at(5.1))
    assert outage_before(began, signs, [], later) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3000), min_size=2, max_size=5), st.integers(0, 2000))
def test_of_replicas_starting_together_after_an_outage_exactly_one_records_it(
        starts_ms: list[int], width_ms: int) -> None:
    """Replicas started within each other's clock uncertainty (each start at or before the
    other's ``began``, the upper bound of its own): exactly one records the outage, whatever
    order they decide in. (Each seeing the other as started first recorded nothing.)"""
    names = [f"replica-{i}" for i in range(len(starts_ms))]
    starts = [at(10) + timedelta(milliseconds=ms) for ms in starts_ms]
    signs = [Sign(at(1), "the last replica beat or leave")]
    recorders = []
    for i, name in enumerate(names):
        began = starts[i] + timedelta(milliseconds=width_ms)
        # read after the settle: every peer has beaten since this start
        peers = [Peer(other, began + timedelta(seconds=3), False, started_at=start)
                 for j, (other, start) in enumerate(zip(names, starts, strict=True)) if j != i]
        if outage_before(began, signs, peers, None, own=(starts[i], name)) is not None:
            recorders.append(name)
    first = min(zip(starts, names, strict=True))[1]
    assert recorders == [first]


def test_skipped_during_counts_the_due_times_of_schedules_active_through_it() -> None:
    outage = Outage(at(0), at(10), "")
    records = [record(), record(), record("*/5 * * * *"), record(enabled=False)]
    assert skipped_during(records, outage) == 10 + 10 + 2
    assert skipped_during(records, Outage(at(0), None, "")) == 0

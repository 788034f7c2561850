"""The invariant checker on hand-built histories: each check passes a good history and fails
the bad one it exists for (no server: the checks are pure)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from nats_scheduler.admin import invariants
from nats_scheduler.admin.invariants import (
    HandlerCall,
    History,
    Options,
    Report,
    StoredEvent,
    Window,
)
from nats_scheduler.core import runcore, schedulecore
from nats_scheduler.core.events import AnyEvent, RunEventType, RunRecord, ScheduleRecord
from nats_scheduler.jetstream.leases import LeaseValue
from nats_scheduler.names import Names, scheduled_run_id
from nats_scheduler.projections.ledger import Ledger
from nats_scheduler.seam import RunPayload, Schedule, Trigger

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
"""A due time of the calendar used here (every 5 minutes)."""
CRON = "*/5 * * * *"
NAMES = Names("P")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Builder:
    """Stores events at given instants (seconds after T0), in stream order."""

    def __init__(self) -> None:
        self.runs: list[StoredEvent] = []
        self.schedules: list[StoredEvent] = []
        self.leases: dict[str, LeaseValue] = {}
        self.states: dict[str, RunRecord] = {}
        self.schedule_state: dict[str, ScheduleRecord] = {}
        self.seq = 0

    def _store(self, into: list[StoredEvent], subject: str, when: float,
               event: AnyEvent | None, error: str | None = None) -> StoredEvent:
        self.seq += 1
        stored = StoredEvent(self.seq, subject, at(when), event, error)
        into.append(stored)
        return stored

    # ---------------------------------------------------------------- schedules

    def apply(self, when: float, deployment: str = "d", *, enabled: bool = True,
              cron: str = CRON) -> None:
        schedule = Schedule(deployment, deployment, cron, "UTC", enabled,
                            RunPayload("t", "p"), 0)
        event = schedulecore.decide_apply(self.schedule_state.get(deployment), schedule,
                                          now=at(when), actor="a")
        assert event is not None
        self.schedule_state[deployment] = event.schedule
        self._store(self.schedules, NAMES.schedule_subject(deployment), when, event)

    # ---------------------------------------------------------------- runs

    def event(self, when: float, event: RunEventType) -> None:
        run = event.run
        self.states[run.run_id] = run
        self._store(self.runs, NAMES.run_subject(run.deployment_id, run.run_id), when, event)

    def create(self, when: float, deployment: str = "d", due: datetime | None = T0,
               run_id: str | None = None) -> str:
        trigger = Trigger.SCHEDULE if due is not None else Trigger.RUN_NOW
        run_id = run_id or (scheduled_run_id(deployment, due) if due else f"q{self.seq}")
        self.event(when, runcore.create(
            run_id=run_id, deployment_id=deployment, trigger=trigger, due_at=due,
            payload=RunPayload("t", "p"), now=at(when), actor="a"))
        return run_id

    def claim(self, when: float, run_id: str, holder: str = "a") -> None:
        self.event(when, runcore.claim(self.states[run_id], holder=holder, now=at(when)))

    def session(self, when: float, run_id: str, session: str = "s1") -> None:
        self.event(when, runcore.session_started(self.states[run_id], session_id=session,
                                                 now=at(when), actor="a"))

    def dispatched(self, when: float, run_id: str) -> None:
        self.event(when, runcore.dispatched(self.states[run_id], turn_id="t1", now=at(when),
                                            actor="a"))

    def refused(self, when: float, run_id: str) -> None:
        self.event(when, runcore.failed(self.states[run_id], error="paused", now=at(when),
                                        actor="a"))

    def full_run(self, when: float, deployment: str = "d", due: datetime | None = T0,
                 holder: str = "a") -> str:
        run_id = self.create(when, deployment, due)
        self.claim(when + 0.01, run_id, holder)
        self.session(when + 0.02, run_id)
        self.dispatched(when + 0.03, run_id)
        return run_id

    def history(self, read_at: float = 100.0) -> History:
        return History("P", list(self.runs), list(self.schedules), dict(self.leases),
                       read_at=at(read_at))

    def ledger(self) -> Ledger:
        ledger = Ledger()
        for stored in self.runs:
            if stored.event is not None and hasattr(stored.event, "run"):
                ledger.apply(stored.seq, stored.event.run)  # type: ignore[union-attr]
        return ledger


def calls_for(run_id: str, start: float, admit: float, session: str | None = "s1"
              ) -> list[HandlerCall]:
    return [HandlerCall(at(start), "start_session", run_id, None, "a", "ok", session),
            HandlerCall(at(admit), "admit_turn", run_id, session, "a", "ok", "t1")]


def checks(report: Report) -> set[str]:
    return {v.check for v in report.violations}


@pytest.fixture
def good() -> Builder:
    """An active Schedule since -60 s, its due time T0 fired once and dispatched."""
    b = Builder()
    b.apply(-60)
    b.full_run(0.1)
    return b


def good_options(b: Builder, **changes: object) -> Options:
    run_id = scheduled_run_id("d", T0)
    base = Options(calls=calls_for(run_id, 0.015, 0.025), ledger=b.ledger(),
                   windows=[Window(at(-30), at(90), "a")], grace=5.0)
    return replace(base, **changes)  # type: ignore[arg-type]


def test_a_good_history_has_no_violations(good: Builder) -> None:
    report = invariants.check(good.history(), good_options(good))
    assert report.ok, report.text()
    assert (report.runs, report.schedules, report.events) == (1, 1, 5)
    assert report.text().startswith("checked 1 runs, 1 schedules, 5 events: 0 violations")


def test_every_check_is_named_and_described() -> None:
    assert set(invariants.CHECKS) == {
        "foreign", "transition", "projection", "doubled", "missed", "invented", "paused",
        "sessions", "unfinished", "admit_order", "stolen", "early", "paging",
        "unexplained"}


# ----------------------------------------------------------------------------- foreign


def test_undecodable_and_misfiled_messages_are_foreign(good: Builder) -> None:
    options = good_options(good)  # the ledger of a provider that skipped the poison
    good._store(good.runs, NAMES.run_subject("d", "x"), 1, None, "not JSON")
    first = good.runs[0].event
    assert isinstance(first, runcore.RunCreated)
    misfiled = runcore.released(first.run, reason="forged", now=at(2), actor="evil")
    good._store(good.runs, NAMES.run_subject("d", "elsewhere"), 2, misfiled)
    schedule_event = good.schedules[0].event
    good._store(good.runs, NAMES.run_subject("d", "y"), 3, schedule_event)
    good._store(good.schedules, NAMES.schedule_subject("other"), 4, schedule_event)
    report = invariants.check(good.history(), options)
    poison = [v for v in report.violations if v.check == "foreign"]
    assert len(poison) == 4, report.text()
    assert checks(report) == {"foreign"}  # skipped by every other check, like a projection


# ----------------------------------------------------------------------------- transitions


def test_an_impossible_transition_is_reported_and_skipped_in_the_replay(good: Builder) -> None:
    run_id = scheduled_run_id("d", T0)
    done = good.states[run_id]
    forged = runcore.RunClaimed(at=at(5), actor="evil", holder="evil",
                                run=msgspec.structs.replace(done, holder="evil"))
    good._store(good.runs, NAMES.run_subject("d", run_id), 5, forged)
    report = invariants.check(good.history(), good_options(good, ledger=None))
    assert checks(report) == {"transition"}, report.text()
    # the ledger that skipped it holds the last valid state: no projection violation
    clean = invariants.check(good.history(), good_options(good, ledger=Builder.ledger(good)))
    assert "projection" in checks(clean)  # a ledger that took the forged state as given
    valid = Ledger()
    valid.apply(4, done)
    assert "projection" not in checks(invariants.check(good.history(),
                                                       good_options(good, ledger=valid)))


def test_an_event_before_created_is_a_transition_violation() -> None:
    b = Builder()
    b.apply(-60)
    run_id = b.create(0.1)
    b.runs.clear()
    b.claim(0.2, run_id)
    report = invariants.check(b.history(), Options(grace=1e9))
    assert checks(report) == {"transition"}


# ----------------------------------------------------------------------------- projection


@pytest.mark.parametrize("damage", ["stale", "extra"])
def test_a_ledger_that_differs_from_the_replay_is_reported(good: Builder, damage: str) -> None:
    ledger = Ledger()
    run_id = scheduled_run_id("d", T0)
    first = good.runs[0].event.run  # type: ignore[union-attr]
    if damage == "stale":
        ledger.apply(1, first)
    if damage == "extra":
        ledger = good.ledger()
        ledger.apply(99, msgspec.structs.replace(first, run_id="ghost"))
    report = invariants.check(good.history(), good_options(good, ledger=ledger))
    assert checks(report) == {"projection"}, report.text()
    assert any(v.subject in (run_id, "ghost") for v in report.violations)


def test_an_unfinished_run_missing_from_the_ledger_is_reported() -> None:
    b = Builder()
    b.apply(-60)
    run_id = b.create(0.1)  # stored, never dispatched: every replica's ledger must hold it
    report = invariants.check(b.history(), Options(grace=1e9, ledger=Ledger()))
    assert checks(report) == {"projection"}, report.text()
    assert [v.subject for v in report.violations] == [run_id]


def test_a_finished_run_the_bounded_ledger_let_go_of_is_no_difference(good: Builder) -> None:
    report = invariants.check(good.history(), good_options(good, ledger=Ledger()))
    assert checks(report) == set(), report.text()


# ----------------------------------------------------------------------------- due times


def test_two_runs_for_one_due_time_are_doubled(good: Builder) -> None:
    good.create(0.2, run_id="another")
    good.claim(0.3, "another")
    good.session(0.4, "another")
    good.dispatched(0.5, "another")
    report = invariants.check(good.history(), good_options(good, calls=None, ledger=None))
    assert checks(report) == {"doubled"}, report.text()
    assert report.violations[0].subject == "d@2030-01-01T12:00Z"


def test_an_expected_due_time_without_a_run_is_missed(good: Builder) -> None:
    later = T0 + timedelta(minutes=5)
    report = invariants.check(good.history(), good_options(good, expected=[("d", later)]))
    assert checks(report) == {"missed"}
    # derived from the windows: T0+5min lies inside a window that lasts until +400 s
    derived = good_options(good, windows=[Window(at(-30), at(400), "a")])
    assert checks(invariants.check(good.history(read_at=500), derived)) == {"missed"}
    # ... but not when the Schedule was disabled before it
    good.apply(200, enabled=False)
    assert invariants.check(good.history(read_at=500), derived).ok


def test_due_times_at_window_edges_or_while_nobody_ran_are_not_expected(good: Builder) -> None:
    windows = [Window(at(-30), at(90), "a"), Window(at(299), at(400), "b")]
    report = invariants.check(good.history(read_at=500), good_options(good, windows=windows))
    assert report.ok, report.text()  # T0+300 s is within the 2 s margin of b's start


@pytest.mark.parametrize("case", ["not_due", "outside_windows", "before_schedule"])
def test_a_run_for_a_time_replicas_could_not_fire_is_invented(case: str) -> None:
    b = Builder()
    if case != "before_schedule":
        b.apply(-60)
    due = T0 + timedelta(minutes=1) if case == "not_due" else T0
    if case == "outside_windows":
        due = T0 + timedelta(hours=1)
    b.full_run(0.1, due=due)
    if case == "before_schedule":
        b.apply(1)
    # a window that ends before T0: no due time is expected, the Run at T0 + 1 h is outside
    windows = [Window(at(-30), at(-1))] if case == "outside_windows" else []
    # these forged Runs are also stored before their due time: judged by ``early`` below
    report = invariants.check(b.history(), Options(windows=windows, early_tolerance=None))
    assert checks(report) == {"invented"}, report.text()
    if case == "outside_windows":  # due times fired by hand (tests) are not bounded
        assert invariants.check(b.history(), Options(windows=windows, ticker_only=False)).ok


# ----------------------------------------------------------------------------- early


@pytest.mark.parametrize(("created", "claimed", "violation"), [
    (0.0, 0.01, None),            # stored at its due time: on time
    (-0.04, 0.01, None),          # within the tolerance (clocks' rates, a cluster's servers)
    (-0.2, 0.01, "created"),      # stored 0.2 s before its due time
    (-20.0, -19.9, "created"),    # a host 20 s fast, firing by its own clock
])
def test_a_run_stored_or_started_before_its_due_time_is_early(
    created: float, claimed: float, violation: str | None,
) -> None:
    b = Builder()
    b.apply(-60)
    run_id = b.create(created)
    b.claim(max(created, claimed) + 0.001, run_id)
    b.session(max(created, claimed) + 0.002, run_id)
    b.dispatched(max(created, claimed) + 0.003, run_id)
    report = invariants.check(b.history(), Options())
    if violation is None:
        assert report.ok, report.text()
        return
    assert checks(report) == {"early"}, report.text()
    assert f"{violation} {-created:.3f} s before its due time" in report.text()
    # fired by hand (a test, an operator): not judged; nor with the check switched off
    assert invariants.check(b.history(), Options(ticker_only=False)).ok
    assert invariants.check(b.history(), Options(early_tolerance=None)).ok


def test_a_run_created_on_time_but_started_early_is_early() -> None:
    """A forged history: the create's stamp is on time, the claim's is before the due time
    (the stream orders them, so only forged or mis-stamped stores look like this)."""
    b = Builder()
    b.apply(-60)
    run_id = b.create(0.0)
    b.claim(-1.0, run_id)
    report = invariants.check(b.history(), Options(grace=1000))
    assert checks(report) == {"early"}, report.text()
    assert "started 1.000 s before" in report.text()


# ----------------------------------------------------------------------------- pause


@pytest.mark.parametrize(("stored", "started", "violation"), [
    (10.3, True, False),   # within the visibility: allowed
    (11.0, False, False),  # late, but refused (never started)
    (11.0, True, True),    # late and started
])
def test_a_run_stored_after_the_pause_must_not_start(stored: float, started: bool,
                                                     violation: bool) -> None:
    b = Builder()
    b.apply(-60)
    b.apply(10, enabled=False)
    run_id = b.create(stored)
    if started:
        b.claim(stored + 0.1, run_id)
        b.session(stored + 0.2, run_id)
        b.dispatched(stored + 0.3, run_id)
    else:
        b.refused(stored + 0.1, run_id)
    report = invariants.check(b.history(), Options())
    assert (checks(report) == {"paused"}) is violation, report.text()
    assert report.ok is not violation


# ----------------------------------------------------------------------------- sessions


def test_two_sessions_in_the_events_are_reported() -> None:
    b = Builder()
    b.apply(-60)
    run_id = b.create(0.1)
    b.claim(0.2, run_id)
    b.session(0.3, run_id, "s1")
    state = b.states[run_id]
    b.event(0.4, runcore.attempt_failed(state, error="x", retry_at=at(0.5), now=at(0.4),
                                        actor="a"))
    b.claim(0.6, run_id)
    b.states[run_id] = msgspec.structs.replace(b.states[run_id], session_id=None)
    b.session(0.7, run_id, "s2")  # a retry that started a second Session
    b.dispatched(0.8, run_id)
    report = invariants.check(b.history(), Options())
    assert "sessions" in checks(report), report.text()


def test_two_sessions_across_the_handler_calls_are_reported(good: Builder) -> None:
    run_id = scheduled_run_id("d", T0)
    calls = [*calls_for(run_id, 0.015, 0.025),
             HandlerCall(at(0.05), "admit_turn", run_id, "s-other")]
    report = invariants.check(good.history(), good_options(good, calls=calls))
    assert checks(report) == {"sessions"}


def test_a_retry_without_the_stored_session_is_reported(good: Builder) -> None:
    run_id = scheduled_run_id("d", T0)
    calls = [*calls_for(run_id, 0.015, 0.025),
             HandlerCall(at(5), "start_session", run_id, None, "b", "ok", "s1")]
    report = invariants.check(good.history(), good_options(good, calls=calls))
    assert checks(report) == {"sessions"}
    assert "without the stored session" in report.violations[0].detail


# ----------------------------------------------------------------------------- unfinished


@pytest.mark.parametrize(("lease_until", "read_at", "violation"), [
    (None, 100.0, True),    # nobody holds it, long past the grace
    (None, 1.5, False),     # still within the grace
    (200.0, 100.0, False),  # a live lease: legitimately in flight
    (50.0, 100.0, True),    # the lease expired long ago
])
def test_an_unfinished_run_nobody_holds_is_reported(lease_until: float | None, read_at: float,
                                                    violation: bool) -> None:
    b = Builder()
    b.apply(-60)
    run_id = b.create(0.1)
    b.claim(0.2, run_id)
    if lease_until is not None:
        b.leases[run_id] = LeaseValue(run_id=run_id, holder="a", expires_at=at(lease_until),
                                      acquired_at=at(0.2))
    report = invariants.check(b.history(read_at), Options(grace=2.0))
    assert (checks(report) == {"unfinished"}) is violation, report.text()


# ----------------------------------------------------------------------------- admit order


@pytest.mark.parametrize(("admit_at", "violation"), [(0.025, False), (0.0, False), (-1.0, True)])
def test_admit_turn_before_the_session_was_stored_is_reported(good: Builder, admit_at: float,
                                                               violation: bool) -> None:
    run_id = scheduled_run_id("d", T0)
    report = invariants.check(good.history(),
                              good_options(good, calls=calls_for(run_id, -1.5, admit_at)))
    assert (checks(report) == {"admit_order"}) is violation, report.text()


def test_admit_turn_for_a_run_without_a_stored_session_is_reported() -> None:
    b = Builder()
    b.apply(-60)
    run_id = b.create(0.1)
    b.claim(0.2, run_id)
    b.dispatched(0.3, run_id)
    report = invariants.check(b.history(), Options(calls=calls_for(run_id, 0.21, 0.25)))
    assert "admit_order" in checks(report)


# ----------------------------------------------------------------------------- stolen


@pytest.mark.parametrize(("victim_from", "victim_until", "taken_at", "violation"), [
    (-30.0, 90.0, 6.0, True),   # alive and renewing all along
    (-30.0, 0.5, 6.0, False),   # died right after its claim: a legitimate takeover
    (0.0, 90.0, 1.0, True),     # started just before its claim, alive since: still stolen
    (-30.0, 5.0, 6.0, False),   # died 1 s before the takeover: its lease could not be renewed
])
def test_a_takeover_from_a_live_holder_is_stolen(victim_from: float, victim_until: float,
                                                 taken_at: float, violation: bool) -> None:
    b = Builder()
    b.apply(-60)
    run_id = b.create(0.1)
    b.claim(0.2, run_id, "a")
    b.claim(taken_at, run_id, "b")  # a takeover: the Run was DISPATCHING under a
    b.session(taken_at + 0.1, run_id)
    b.dispatched(taken_at + 0.2, run_id)
    windows = [Window(at(victim_from), at(victim_until), "a"), Window(at(-30), at(90), "b")]
    report = invariants.check(b.history(), Options(windows=windows, lease_seconds=2.0))
    assert (checks(report) == {"stolen"}) is violation, report.text()


def test_report_shapes() -> None:
    b = Builder()
    b.apply(-60)
    b.create(0.1)
    report = invariants.check(b.history(), Options(grace=1.0))
    data = report.to_builtins()
    assert data["runs"] == 1 and data["violations"][0]["check"] == "unfinished"
    assert report.by_check() == {"unfinished": 1}
    assert report.text().splitlines()[1].startswith("  unfinished: ")


def test_a_clock_ahead_fires_early_within_the_declared_skew() -> None:
    b = Builder()
    b.apply(-60)
    b.full_run(0.1)  # due T0, fired by a replica whose clock ran ahead
    windows = [Window(at(-120), at(-60))]
    assert checks(invariants.check(b.history(), Options(windows=windows))) == {"invented"}
    assert invariants.check(b.history(), Options(windows=windows, skew=90.0)).ok


def test_a_restarted_replica_taking_back_its_own_run_is_not_a_theft() -> None:
    b = Builder()
    b.apply(-60)
    run_id = b.create(0.1)
    b.claim(0.2, run_id, "a")
    b.claim(6.0, run_id, "a")  # the same identity, restarted, resumes its leftover
    b.session(6.1, run_id)
    b.dispatched(6.2, run_id)
    windows = [Window(at(-30), at(90), "a")]
    assert invariants.check(b.history(), Options(windows=windows, lease_seconds=2.0)).ok


@pytest.mark.parametrize(("refused", "violation"), [(True, False), (False, True)])
def test_a_late_create_carrying_its_claim_counts_as_started_unless_refused(
        refused: bool, violation: bool) -> None:
    """Schema 2: a create may carry its creator's claim; stored after the pause it is a
    start unless the gate's refusal follows it."""
    from nats_scheduler.core.pause_visibility import NOT_STARTED_AFTER_PAUSE

    b = Builder()
    b.apply(-60)
    b.apply(10, enabled=False)
    run_id = scheduled_run_id("d", T0)
    b.event(11.0, runcore.create(
        run_id=run_id, deployment_id="d", trigger=Trigger.SCHEDULE, due_at=T0,
        payload=RunPayload("t", "p"), now=at(11.0), actor="a", holder="a"))
    if refused:
        b.event(11.1, runcore.failed(b.states[run_id], error=NOT_STARTED_AFTER_PAUSE,
                                     now=at(11.1), actor="a"))
    else:
        b.session(11.2, run_id)
        b.dispatched(11.3, run_id)
    report = invariants.check(b.history(), Options())
    assert (checks(report) == {"paused"}) is violation, report.text()


def test_a_takeover_right_after_a_claimed_create_of_a_live_holder_is_stolen() -> None:
    b = Builder()
    b.apply(-60)
    run_id = scheduled_run_id("d", T0)
    b.event(0.1, runcore.create(
        run_id=run_id, deployment_id="d", trigger=Trigger.SCHEDULE, due_at=T0,
        payload=RunPayload("t", "p"), now=at(0.1), actor="a", holder="a"))
    b.claim(1.0, run_id, holder="b")
    options = Options(windows=[Window(at(-30), at(90), "a"), Window(at(-30), at(90), "b")],
                      lease_seconds=5.0)
    assert "stolen" in checks(invariants.check(b.history(), options))


# ----------------------------------------------------------------------------- unexplained


def accounted(b: Builder, read_at: float, **facts: object) -> History:
    """The history with the store's account facts: outages recorded since before it all."""
    return replace(b.history(read_at), account=invariants.AccountFacts(
        accounted_since=at(-3600), **facts))  # type: ignore[arg-type]


def test_a_forged_gap_is_reported_and_explained_ones_are_not() -> None:
    # every 5 minutes since -60 s: due at 0, 300, 600, 900; read at 1000 (a minute's grace)
    b = Builder()
    b.apply(-60)
    b.full_run(0.1)
    b.full_run(900.1, due=at(900))
    history = accounted(b, 1000)
    report = invariants.check(history, Options(grace=5.0))
    assert sorted(v.subject for v in report.violations if v.check == "unexplained") == [
        "d@2030-01-01T12:05Z", "d@2030-01-01T12:10Z"]
    # an outage recorded across 12:05 and 12:10 explains both
    from nats_scheduler.core.dueaccount import Outage
    explained = accounted(b, 1000, outages=[Outage(at(200), at(700), "the last Run event")])
    assert "unexplained" not in checks(invariants.check(explained, Options(grace=5.0)))
    # so does a Schedule disabled across them
    b.apply(250, enabled=False)
    b.apply(800)
    assert "unexplained" not in checks(invariants.check(accounted(b, 1000), Options(grace=5.0)))


def test_unexplained_is_not_judged_where_the_store_cannot_answer() -> None:
    b = Builder()
    b.apply(-60)
    history = b.history(1000)  # no account facts: a store that records no outages
    assert "unexplained" not in checks(invariants.check(history, Options(grace=5.0)))
    # within the last minute: pending, not unexplained
    assert "unexplained" not in checks(invariants.check(accounted(b, 30), Options(grace=5.0)))
    # due times fired by hand (tests): not judged
    assert "unexplained" not in checks(invariants.check(
        accounted(b, 1000), Options(grace=5.0, ticker_only=False)))

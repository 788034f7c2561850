"""Check the provider's promises against what the store holds and what the handler saw.

The promise to AstraBox (docs/contract.md, "The guarantees"): every due time a running
replica lives through becomes exactly one Run; every Run ends DISPATCHED or FAILED; a
paused Schedule stops starting Runs within ``pause_visibility_seconds``; a Run has one
Session. Tests prove these for the faults they inject; this module lets anybody prove them
for a store after the fact, from the stored events alone (plus, when given, the handler's
record of its calls and the windows in which replicas were alive). ``nats-scheduler check``
runs it against a live store; the fault tests and ``bench/soak.py`` end with it.

Everything here is pure: a :class:`History` (every stored Schedule and Run event with the
server's timestamp of storing it, and the leases) goes in, a :class:`Report` of
:class:`Violation` comes out. Judgements use the server's timestamps, never a replica's
clock, except where the handler's record is compared with them (``clock_tolerance``).

The checks (``CHECKS`` names them; docs/failure-modes.md says which test proves what):

- ``poison``: a message on an event subject that does not decode as an event of that
  subject, or names another Run or Schedule than its subject. Skipped by the other checks,
  as the projections skip it.
- ``transition``: a Run event that :func:`~nats_scheduler.core.runcore.evolve` rejects (an
  impossible transition, or a state that does not follow from the Run before it). The
  replay continues from the last valid state, which is what the ledger must hold.
- ``projection``: a provider's ledger (when given) differs from the replay of the events.
- ``doubled`` / ``missed`` / ``invented``: Runs per (deployment, due time) other than one
  for a due time replicas lived through (``expected``, or derived from the Schedule's
  history and the liveness ``windows``), or a scheduled Run for a time that is not a due
  time of its Schedule, or outside every window.
- ``paused``: a scheduled Run started although it was stored more than the pause
  visibility after its Schedule stopped firing (disabled, held or deleted).
- ``sessions``: a Run with two Session IDs, across its events and the handler's calls;
  or a retry that did not reuse the stored Session ID.
- ``unfinished``: a Run neither DISPATCHED nor FAILED, with no live lease, unmoved for
  longer than ``grace``.
- ``admit_order``: an ``admit_turn`` call before the Run's Session ID was stored.
- ``stolen``: a takeover (``run.claimed`` with ``takeover_from``) from a holder whose
  liveness window covered the whole lease before it.
- ``early``: a scheduled Run whose creation (or first claim: the start) the server stored
  before its due time, beyond ``EARLY_TOLERANCE``; only when the tickers alone fired.

:class:`Checker` runs them one stored event at a time, in memory bounded by the Runs still
open (``nats-scheduler check`` streams a production store through it); :func:`check` feeds
it a :class:`History` held in memory.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from ..core import calendar
from ..core.events import (
    AnyEvent,
    RunClaimed,
    RunCreated,
    RunEvent,
    RunEventType,
    RunFailed,
    RunRecord,
    RunSessionStarted,
    ScheduleEvent,
    ScheduleRecord,
)
from ..core.pause_visibility import NOT_STARTED_AFTER_PAUSE, PAUSE_VISIBILITY_SECONDS
from ..core.runcore import TransitionError, evolve
from ..jetstream.leases import LeaseValue
from ..names import Names, due_token, scheduled_run_id
from ..projections.ledger import Ledger
from ..seam import RunState, Trigger

CHECKS: dict[str, str] = {
    "poison": "a stored message that is not a valid event of its subject",
    "transition": "a Run event that cannot follow the Run's state before it",
    "projection": "the provider's ledger differs from a replay of the events",
    "doubled": "more than one Run for one due time of one deployment",
    "missed": "no Run for a due time a running replica lived through",
    "invented": "a scheduled Run for a time that is not a due time replicas lived through",
    "paused": "a Run started although stored after its Schedule stopped firing",
    "sessions": "a Run with more than one Session ID, or a retry without the stored one",
    "unfinished": "a Run neither dispatched nor failed, nobody holding it, past the grace",
    "admit_order": "admit_turn called before the Run's Session ID was stored",
    "stolen": "a Run taken over from a holder that was alive through its whole lease",
    "early": "a scheduled Run created or started before its due time, by the server's clock",
}

EARLY_TOLERANCE = 0.05
"""Seconds a scheduled Run may be stored (or claimed) before its due time by the server's
timestamps and still not be ``early``. A replica fires by the lower bound of the server's
clock (docs/architecture.md, "One clock: the store's"), so its create reaches the server
after the due time; the tolerance covers the two clocks' rates drifting between samples
(at most ``FRESH_SECONDS`` x a few hundred ppm: a few milliseconds) and the servers of a
cluster disagreeing with each other by some milliseconds (the presence bucket's leader
stamps the samples, the Run stream's leader the Runs)."""


# ----------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class StoredEvent:
    """One stored message: stream sequence, subject, server time of storing, the event.

    ``event`` is None when the message did not decode; ``error`` then says why.
    """

    seq: int
    subject: str
    stored_at: datetime
    event: AnyEvent | None
    error: str | None = None

    @property
    def type(self) -> str:
        if self.event is None:
            return "?"
        return str(type(self.event).__struct_config__.tag)


@dataclass(frozen=True)
class HandlerCall:
    """One call the handler (AstraBox) received, as its own record says.

    ``at`` is when the handler recorded the call, on its host's clock; ``session_id`` the
    Session ID passed in; ``returned`` what the call returned (ok calls), when recorded.
    """

    at: datetime
    method: str
    run_id: str
    session_id: str | None = None
    process: str = ""
    outcome: str = "ok"
    returned: str | None = None


@dataclass(frozen=True)
class Window:
    """An interval in which a replica was running and responsive (``identity``: which)."""

    start: datetime
    end: datetime
    identity: str | None = None

    def covers(self, start: datetime, end: datetime) -> bool:
        return self.start <= start and end <= self.end


@dataclass(frozen=True)
class History:
    """Every stored event of one prefix, in stream order, and the leases stored now."""

    prefix: str
    runs: Sequence[StoredEvent]
    schedules: Sequence[StoredEvent]
    leases: Mapping[str, LeaseValue] = field(default_factory=dict)
    read_at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass(frozen=True)
class Options:
    """What the caller knows beyond the store, and the tolerances of the checks."""

    calls: Sequence[HandlerCall] | None = None
    """The handler's record of calls; None skips the checks that need it."""
    ledger: Ledger | None = None
    """A provider's Run ledger to compare with the replay (caught up with the store)."""
    windows: Sequence[Window] = ()
    """When replicas were alive; with them, due times are expected and bounded, and
    takeovers judged."""
    ticker_only: bool = True
    """Only the replicas' tickers fired due times (so it is in production). False when a
    test also fired due times by hand: the windows then judge only takeovers."""
    expected: Iterable[tuple[str, datetime]] | None = None
    """(deployment, due time) pairs that must each have exactly one Run."""
    now: datetime | None = None
    """The instant of judgement (default: when the history was read)."""
    grace: float = 30.0
    """Seconds an unfinished Run (or an expected due time) may legitimately be in flight."""
    margin: float = 2.0
    """Seconds around window edges and Schedule changes in which a due time is not expected."""
    pause_visibility: float = PAUSE_VISIBILITY_SECONDS
    lease_seconds: float = 5.0
    clock_tolerance: float = 0.5
    """Seconds the handler's clock may disagree with the server's."""
    skew: float = 0.0
    """Seconds a replica's clock may have run ahead: it fires due times that early, so a
    due time up to this far after a window is not invented."""
    early_tolerance: float | None = EARLY_TOLERANCE
    """Seconds a scheduled Run may be stored before its due time (``early``); None skips it
    (a provider driven by a hand-moved clock)."""


# ----------------------------------------------------------------------------- outputs


@dataclass(frozen=True, order=True)
class Violation:
    """One broken promise: which check, about what (a Run ID or deployment@due), details."""

    check: str
    subject: str
    detail: str

    def line(self) -> str:
        return f"{self.check}: {self.subject}: {self.detail}"


@dataclass(frozen=True)
class Report:
    """The violations found, sorted, and what was looked at."""

    violations: tuple[Violation, ...]
    runs: int
    schedules: int
    events: int

    @property
    def ok(self) -> bool:
        return not self.violations

    def by_check(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for violation in self.violations:
            counts[violation.check] = counts.get(violation.check, 0) + 1
        return counts

    def text(self) -> str:
        """A human-readable report: a summary line, then one line per violation."""
        head = (f"checked {self.runs} runs, {self.schedules} schedules, {self.events} events: "
                f"{len(self.violations)} violations")
        return "\n".join([head, *(f"  {v.line()}" for v in self.violations)])

    def to_builtins(self) -> dict[str, object]:
        return {"runs": self.runs, "schedules": self.schedules, "events": self.events,
                "violations": [dataclasses.asdict(v) for v in self.violations]}


# ----------------------------------------------------------------------------- the check


def check(history: History, options: Options | None = None) -> Report:
    """Run every check that the history and options allow; see the module docstring."""
    checker = Checker(history.prefix, history.schedules, history.leases, options)
    for stored in history.runs:
        checker.feed(stored)
    return checker.finish(history.read_at)


RunHistory = list[tuple[StoredEvent, RunEventType]]
ScheduleHistory = list[tuple[StoredEvent, ScheduleEvent]]


@dataclass
class _Open:
    """A Run still open in the replay: its valid events so far and the state they leave."""

    events: RunHistory
    state: RunRecord


class Checker:
    """The checks, fed one stored Run event at a time in stream order: bounded memory.

    A production store holds up to 10,000 Runs per deployment (docs/configuration.md,
    "History retention"), a million at a hundred deployments: far too many events to hold.
    So a Run's events are kept only while it is open (neither DISPATCHED nor FAILED): every
    check about one Run is judged when it finishes (or at :meth:`finish` for those still
    open), and then only a 64-bit hash of its ID stays, which is all the checks across Runs
    need (a scheduled Run's ID is derived from its deployment and due time, so "one Run per
    due time" is a question about IDs seen). Memory: about 70 bytes per Run stored, plus the
    open Runs, the Schedules and the handler's calls when given. A hash collision (about one
    in 10^7 at a million Runs) could report a false ``doubled`` or ``transition``, never hide
    a violation.

    ``partial``: the events start mid-stream (``check --since``): a Run whose creation came
    before the first event is skipped, not reported.
    """

    def __init__(self, prefix: str, schedules: Iterable[StoredEvent],
                 leases: Mapping[str, LeaseValue] | None = None,
                 options: Options | None = None, *, partial: bool = False) -> None:
        self._names = Names(prefix)
        self._options = options or Options()
        self._partial = partial
        schedule_events = list(schedules)
        self._schedules, self._found = _group_schedules(self._names, schedule_events)
        self._leases = leases or {}
        self._calls = _calls_by_run(self._options.calls)
        self._open: dict[str, _Open] = {}
        self._seen: set[int] = set()
        """``hash()`` of the ID of every Run whose creation was read."""
        self._odd: dict[tuple[str, datetime], list[str]] = {}
        """Scheduled Runs whose ID is not the one derived from their due time (forged)."""
        self.runs = 0
        self.events = len(schedule_events)
        self.skipped = 0
        """Events of Runs created before the window (``partial``), not judged."""

    # ------------------------------------------------------------------ feeding

    def feed(self, stored: StoredEvent) -> None:
        """One stored Run event, in stream order."""
        self.events += 1
        problem = _run_problem(self._names, stored)
        if problem is not None:
            self._found.append(Violation("poison", f"{stored.subject}#{stored.seq}", problem))
            return
        event: RunEventType = stored.event  # type: ignore[assignment]
        run_id = event.run.run_id
        current = self._open.get(run_id)
        if current is None:
            self._first(stored, event)
            return
        try:
            current.state = evolve(current.state, event)
        except TransitionError as exc:
            self._found.append(Violation("transition", run_id,
                                         f"{stored.type} at #{stored.seq}: {exc}"))
            return
        current.events.append((stored, event))
        if current.state.finished:
            self._close(run_id)

    def _first(self, stored: StoredEvent, event: RunEventType) -> None:
        """An event of a Run not open: its creation, or one that cannot be (reported)."""
        run_id = event.run.run_id
        known = hash(run_id) in self._seen
        if not isinstance(event, RunCreated) or known:
            if known:
                detail = f"run {run_id} already finished" if not isinstance(
                    event, RunCreated) else f"run {run_id} already exists"
            elif self._partial:
                self.skipped += 1
                return
            else:
                detail = f"run {run_id}: {type(event).__name__} before created"
            self._found.append(Violation("transition", run_id,
                                         f"{stored.type} at #{stored.seq}: {detail}"))
            return
        self._seen.add(hash(run_id))
        self.runs += 1
        run = event.run
        if (run.trigger == Trigger.SCHEDULE and run.due_at is not None
                and run_id != scheduled_run_id(run.deployment_id, run.due_at)):
            self._odd.setdefault((run.deployment_id, run.due_at), []).append(run_id)
        self._open[run_id] = _Open([(stored, event)], run)
        if run.finished:
            self._close(run_id)

    def _close(self, run_id: str) -> None:
        """Judge one Run on all its events, and forget them."""
        current = self._open.pop(run_id)
        self._found += self._judge(run_id, current.events, current.state)

    def _judge(self, run_id: str, events: RunHistory, state: RunRecord) -> list[Violation]:
        options = self._options
        found: list[Violation] = []
        found += _projection_of(run_id, state, options.ledger)
        first, created = events[0]
        if isinstance(created, RunCreated) and created.run.trigger == Trigger.SCHEDULE:
            run = created.run
            schedule = self._schedules.get(run.deployment_id, [])
            problem = _invented(run, first, schedule, options)
            if problem:
                assert run.due_at is not None
                found.append(Violation("invented", _due_subject(run.deployment_id, run.due_at),
                                       problem))
            found += _paused(run, first, events, schedule, options.pause_visibility)
            found += _early(run, events, options)
        calls = self._calls.pop(run_id, [])
        found += _sessions_of(run_id, events, calls, options.clock_tolerance)
        found += _admit_order_of(run_id, events, calls, options.clock_tolerance)
        found += _stolen_of(run_id, events, _alive_by_identity(options.windows),
                            options.lease_seconds)
        return found

    # ------------------------------------------------------------------ the end

    def finish(self, read_at: datetime) -> Report:
        """Judge the Runs still open and the checks across Runs; the report."""
        options = self._options
        now = options.now or read_at
        found = self._found
        for run_id in list(self._open):
            current = self._open[run_id]
            found += _unfinished_of(run_id, current.state, current.events, self._leases, now,
                                    options.grace)
            self._close(run_id)
        found += self._due_times(now)
        found += self._unknown_in_ledger()
        for run_id, calls in self._calls.items():  # calls of Runs never read
            found += _admit_order_of(run_id, [], calls, options.clock_tolerance)
        self._calls = {}
        return Report(tuple(sorted(set(found))), runs=self.runs,
                      schedules=len(self._schedules), events=self.events)

    def _has_run(self, key: tuple[str, datetime]) -> bool:
        return key in self._odd or hash(scheduled_run_id(*key)) in self._seen

    def _due_times(self, now: datetime) -> list[Violation]:
        """None doubled (only forged IDs can double a due time); none expected missed."""
        found = []
        for key, run_ids in self._odd.items():
            derived = scheduled_run_id(*key)
            ids = set(run_ids) | ({derived} if hash(derived) in self._seen else set())
            if len(ids) > 1:
                found.append(Violation("doubled", _due_subject(*key),
                                       f"{len(ids)} runs: {', '.join(sorted(ids))}"))
        for key in _expected(self._schedules, self._options, now):
            if not self._has_run(key):
                found.append(Violation("missed", _due_subject(*key), "no run stored"))
        return found

    def _unknown_in_ledger(self) -> list[Violation]:
        ledger = self._options.ledger
        if ledger is None:
            return []
        return [Violation("projection", record.run_id, "in the ledger but no valid event stores it")
                for deployment_id in ledger.deployments()
                for record in ledger.known_runs(deployment_id)
                if hash(record.run_id) not in self._seen]


# ----------------------------------------------------------------------------- grouping


def _run_problem(names: Names, stored: StoredEvent) -> str | None:
    if stored.event is None:
        return f"does not decode: {stored.error}"
    if not isinstance(stored.event, RunEvent):
        return f"a {stored.type} event on a run subject"
    try:
        deployment_id, run_id = names.run_ids_of_subject(stored.subject)
    except ValueError:
        return "not a run subject"
    run = stored.event.run
    if (run.deployment_id, run.run_id) != (deployment_id, run_id):
        return f"names run {run.run_id!r} of {run.deployment_id!r}, not its subject's"
    return None


def _group_schedules(names: Names, stored_events: Iterable[StoredEvent]
                     ) -> tuple[dict[str, ScheduleHistory], list[Violation]]:
    schedules: dict[str, ScheduleHistory] = {}
    poison: list[Violation] = []
    for stored in stored_events:
        event = stored.event
        if event is None or not isinstance(event, ScheduleEvent):
            detail = (f"does not decode: {stored.error}" if event is None
                      else f"a {stored.type} event on a schedule subject")
            poison.append(Violation("poison", f"{stored.subject}#{stored.seq}", detail))
            continue
        if stored.subject != _schedule_subject(names, event.schedule.deployment_id):
            poison.append(Violation("poison", f"{stored.subject}#{stored.seq}",
                                    "names another deployment than its subject"))
            continue
        schedules.setdefault(event.schedule.deployment_id, []).append((stored, event))
    return schedules, poison


def _schedule_subject(names: Names, deployment_id: str) -> str:
    try:
        return names.schedule_subject(deployment_id)
    except (ValueError, TypeError):
        return ""


# ----------------------------------------------------------------------------- one Run


def _projection_of(run_id: str, state: RunRecord, ledger: Ledger | None) -> list[Violation]:
    """What the ledger holds is the replayed state (a finished Run it no longer holds is not
    a difference: the ledger is bounded; one it holds in another state is)."""
    if ledger is None:
        return []
    held = ledger.get(run_id)
    if (held is None and state.finished) or held == state:
        return []
    shown = "nothing" if held is None else held.state.value
    return [Violation("projection", run_id,
                      f"ledger holds {shown}, the events say {state.state.value}")]


def _early(run: RunRecord, events: RunHistory, options: Options) -> list[Violation]:
    """A scheduled Run created, or first claimed (so started), before its due time by the
    server's timestamps, beyond ``early_tolerance``. Only when the tickers alone fired due
    times (a test or an operator may fire one ahead on purpose)."""
    if options.early_tolerance is None or not options.ticker_only or run.due_at is None:
        return []
    bound = run.due_at - timedelta(seconds=options.early_tolerance)
    first = events[0][0]
    if first.stored_at < bound:
        early = (run.due_at - first.stored_at).total_seconds()
        return [Violation("early", run.run_id,
                          f"created {early:.3f} s before its due time {run.due_at.isoformat()}")]
    claims = [stored for stored, event in events if isinstance(event, RunClaimed)]
    if claims and claims[0].stored_at < bound:
        early = (run.due_at - claims[0].stored_at).total_seconds()
        return [Violation("early", run.run_id,
                          f"started {early:.3f} s before its due time {run.due_at.isoformat()}")]
    return []


# ----------------------------------------------------------------------------- due times


def _until(events: ScheduleHistory, instant: datetime) -> ScheduleHistory:
    """The Schedule's events stored at or before ``instant``, in order."""
    return list(itertools.takewhile(lambda pair: pair[0].stored_at <= instant, events))


def _schedule_at(events: ScheduleHistory, instant: datetime) -> ScheduleRecord | None:
    """The Schedule as its last event stored at or before ``instant`` left it."""
    before = _until(events, instant)
    return before[-1][1].schedule if before else None


def _inactive_since(events: ScheduleHistory, instant: datetime) -> datetime | None:
    """When the Schedule stopped firing, if it was not firing at ``instant``; else None."""
    since = None
    for stored, event in _until(events, instant):
        if event.schedule.active:
            since = None
        elif since is None:
            since = stored.stored_at
    return since


def _due_subject(deployment_id: str, due: datetime) -> str:
    """A due time of a deployment as a violation names it: ``<deployment>@<due token>``."""
    return f"{deployment_id}@{due_token(due)}"


def _invented(run: RunRecord, first: StoredEvent, events: ScheduleHistory,
              options: Options) -> str | None:
    """Why a scheduled Run's due time is not one replicas could have fired, or None."""
    assert run.due_at is not None
    lookback = first.stored_at - timedelta(seconds=options.pause_visibility)
    # The definition in force when the Run was stored, or shortly before (a replica may
    # decide on a read that a change overtook within the pause visibility).
    candidates = [s for s in (_schedule_at(events, first.stored_at),
                              _schedule_at(events, lookback)) if s is not None]
    if not candidates:
        return "stored before its schedule existed"
    if not any(_is_due(s, run.due_at) for s in candidates):
        return "not a due time of its schedule"
    if (options.windows and options.ticker_only
            and not _near_window(run.due_at, options.windows, options.margin, options.skew)):
        return "due while no replica was alive"
    return None


def _is_due(schedule: ScheduleRecord, due: datetime) -> bool:
    try:
        return calendar.is_due_time(schedule.cron, schedule.timezone, due)
    except ValueError:
        return False


def _near_window(instant: datetime, windows: Sequence[Window], margin: float,
                 skew: float) -> bool:
    pad, ahead = timedelta(seconds=margin), timedelta(seconds=margin + skew)
    return any(w.start - pad <= instant <= w.end + ahead for w in windows)


def _expected(schedules: Mapping[str, ScheduleHistory], options: Options,
              now: datetime) -> set[tuple[str, datetime]]:
    """Given pairs, plus every due time inside a window while its Schedule was active."""
    expected = set(options.expected or ())
    if not options.windows or not options.ticker_only:
        return expected
    pad = timedelta(seconds=options.margin)
    until = now - timedelta(seconds=options.grace)
    for deployment_id, events in schedules.items():
        for start, end, record in _active_spans(events, now):
            for window in _merged(options.windows):
                lo = max(start, window.start) + pad
                hi = min(end - pad, window.end - pad, until)
                if lo < hi:
                    expected.update((deployment_id, due) for due in _dues(record, lo, hi))
    return expected


def _active_spans(events: ScheduleHistory, now: datetime
                  ) -> Iterator[tuple[datetime, datetime, ScheduleRecord]]:
    """(from, until, record) for each stretch in which one active definition was in force."""
    for i, (stored, event) in enumerate(events):
        if event.schedule.active:
            until = events[i + 1][0].stored_at if i + 1 < len(events) else now
            yield stored.stored_at, until, event.schedule


def _merged(windows: Sequence[Window]) -> list[Window]:
    """The union of windows, as disjoint intervals (any replica alive is enough)."""
    out: list[Window] = []
    for window in sorted(windows, key=lambda w: w.start):
        if out and window.start <= out[-1].end:
            last = out[-1]
            out[-1] = Window(last.start, max(last.end, window.end))
        else:
            out.append(Window(window.start, window.end))
    return out


def _dues(record: ScheduleRecord, lo: datetime, hi: datetime) -> list[datetime]:
    try:
        dues = calendar.due_times(record.cron, record.timezone, lo - timedelta(seconds=1), hi)
    except ValueError:
        return []
    return [d for d in dues if lo <= d <= hi]


# ----------------------------------------------------------------------------- pause


def _started(events: RunHistory) -> bool:
    """A claim, or a create that carries one (schema 2) unless the gate refused it next."""
    if any(isinstance(event, RunClaimed) for _, event in events):
        return True
    first = events[0][1] if events else None
    if not (isinstance(first, RunCreated) and first.holder is not None):
        return False
    after = events[1][1] if len(events) > 1 else None
    return not (isinstance(after, RunFailed) and after.error == NOT_STARTED_AFTER_PAUSE)


def _paused(run: RunRecord, first: StoredEvent, events: RunHistory,
            schedule: ScheduleHistory, visibility: float) -> list[Violation]:
    """No scheduled Run stored later than ``visibility`` after its Schedule stopped, started.

    Judged on the server's timestamps: the Schedule event that stopped it was stored before
    ``apply`` (or the hold, or ``delete``) returned, so this is the stricter reading.
    """
    since = _inactive_since(schedule, first.stored_at)
    if since is None or first.stored_at - since <= timedelta(seconds=visibility):
        return []
    if not _started(events):
        return []
    late = (first.stored_at - since).total_seconds()
    return [Violation("paused", run.run_id,
                      f"stored {late:.3f} s after its schedule stopped, and started")]


# ----------------------------------------------------------------------------- sessions


def _sessions_of(run_id: str, events: RunHistory, calls: Sequence[HandlerCall],
                 tolerance: float = 0.5) -> list[Violation]:
    """One Session ID per Run, in its events and the handler's calls; retries reuse it."""
    found = []
    sessions = {event.run.session_id for _, event in events if event.run.session_id}
    sessions |= {e.session_id for _, e in events if isinstance(e, RunSessionStarted)}
    for call in calls:
        returned = call.returned if call.method == "start_session" else None
        sessions |= {s for s in (call.session_id, returned) if s}
    if len(sessions) > 1:
        found.append(Violation("sessions", run_id,
                               f"{len(sessions)} sessions: {', '.join(sorted(sessions))}"))
    found += _session_not_reused(run_id, events, list(calls), tolerance)
    return found


def _calls_by_run(calls: Sequence[HandlerCall] | None) -> dict[str, list[HandlerCall]]:
    by_run: dict[str, list[HandlerCall]] = {}
    for call in calls or ():
        by_run.setdefault(call.run_id, []).append(call)
    return by_run


def _session_stored_at(events: RunHistory) -> datetime | None:
    for stored, event in events:
        if isinstance(event, RunSessionStarted):
            return stored.stored_at
    return None


def _session_not_reused(run_id: str, events: RunHistory, calls: list[HandlerCall],
                        tolerance: float) -> list[Violation]:
    """A ``start_session`` call without the Session ID that was stored before it."""
    stored_at = _session_stored_at(events)
    if stored_at is None:
        return []
    late = [c for c in calls if c.method == "start_session" and c.session_id is None
            and c.at - stored_at > timedelta(seconds=tolerance)]
    if not late:
        return []
    return [Violation("sessions", run_id,
                      f"start_session called without the stored session "
                      f"{(late[0].at - stored_at).total_seconds():.1f} s after it was stored")]


def _admit_order_of(run_id: str, events: RunHistory, calls: Sequence[HandlerCall],
                    tolerance: float) -> list[Violation]:
    """Every ``admit_turn`` call came after the Run's ``run.session_started`` was stored."""
    admits = [c for c in calls if c.method == "admit_turn"]
    if not admits:
        return []
    stored_at = _session_stored_at(events)
    first = min(c.at for c in admits)
    if stored_at is None:
        return [Violation("admit_order", run_id,
                          "admit_turn called but no session was ever stored")]
    if first + timedelta(seconds=tolerance) < stored_at:
        early = (stored_at - first).total_seconds()
        return [Violation("admit_order", run_id,
                          f"admit_turn called {early:.3f} s before the session was stored")]
    return []


# ----------------------------------------------------------------------------- liveness


def _unfinished_of(run_id: str, state: RunRecord, events: RunHistory,
                   leases: Mapping[str, LeaseValue], now: datetime, grace: float
                   ) -> list[Violation]:
    """The Run is finished, held under a live lease, or moved within ``grace``."""
    if state.state in (RunState.DISPATCHED, RunState.FAILED):
        return []
    lease = leases.get(run_id)
    if lease is not None and lease.expires_at > now:
        return []
    since = events[-1][0].stored_at
    if state.retry_at is not None and state.retry_at > since:
        since = state.retry_at
    idle = (now - since).total_seconds()
    if idle <= grace:
        return []
    return [Violation("unfinished", run_id,
                      f"{state.state.value} for {idle:.1f} s, nobody holds it")]


def _alive_by_identity(windows: Sequence[Window]) -> dict[str, list[Window]]:
    alive: dict[str, list[Window]] = {}
    for window in windows:
        if window.identity is not None:
            alive.setdefault(window.identity, []).append(window)
    return alive


def _stolen_of(run_id: str, events: RunHistory, alive: Mapping[str, list[Window]],
               lease_seconds: float) -> list[Violation]:
    """No takeover from a holder that was alive all along since it could last have renewed.

    A takeover stored at ``T`` from holder ``X`` is legitimate only if ``X`` stopped renewing
    for a lease: so ``X``'s liveness windows must not cover ``[max(T - lease, X's claim), T]``.
    """
    if not alive:
        return []
    found = []
    span = timedelta(seconds=lease_seconds)
    claimed_at: dict[str, datetime] = {}
    for stored, event in events:
        if isinstance(event, RunCreated) and event.holder is not None:
            claimed_at[event.holder] = stored.stored_at  # a create with its claim
        if not isinstance(event, RunClaimed):
            continue
        victim = event.takeover_from
        if victim is not None and victim != event.holder:  # not a restart taking its own
            since = max(stored.stored_at - span, claimed_at.get(victim, stored.stored_at))
            if any(w.covers(since, stored.stored_at) for w in alive.get(victim, [])):
                found.append(Violation("stolen", run_id,
                                       f"{event.holder} took it from {victim}, alive "
                                       f"throughout, at #{stored.seq}"))
        claimed_at[event.holder] = stored.stored_at
    return found

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

- ``foreign``: a stored message that is not the scheduler's own (jetstream/foreign.py): on
  an event subject, one that does not decode as an event of that subject, or names another
  Run or Schedule than its subject; in the history index, the buckets, the outage records
  and the checkpoints, one their readers cannot take (``foreign_scan.py``, passed in as
  ``History.foreign``). Skipped by the other checks, as every reader skips it.
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
- ``unexplained``: a due time of the calendar as it stood, a minute past, with no Run and
  nothing that explains it: not disabled, held, changed at that moment, nor inside an
  outage the store recorded (``invariant_account.py``; the account of due times of
  ``nats-scheduler explain`` over every Schedule). Only where the store can answer: from
  the first start of a release that records outages, within the retention.
- ``paging``: a deployment's history, walked page by page as a client pages it, that does
  not list every retained Run exactly once, newest first, every page full but the last.
  Not judged here from events: ``nats-scheduler check`` walks a sample of deployments on
  the store itself (``paging_check.py``).

:class:`Checker` runs them one stored event at a time, in memory bounded by the Runs still
open (``nats-scheduler check`` streams a production store through it); :func:`check` feeds
it a :class:`History` held in memory. The inputs and the report are in
``invariant_inputs.py`` and ``invariant_report.py`` (importable from here too), the
judgements in ``invariant_schedules.py`` (against the Schedule's history) and
``invariant_runs.py`` (one Run on its own events).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from ..core.events import RunCreated, RunEvent, RunEventType, RunRecord, ScheduleEvent
from ..core.runcore import TransitionError, evolve
from ..jetstream.leases import LeaseValue
from ..names import Names, scheduled_run_id
from ..seam import Trigger
from .invariant_account import Histories, unexplained_of
from .invariant_inputs import (
    EARLY_TOLERANCE,
    AccountFacts,
    HandlerCall,
    History,
    Options,
    RunHistory,
    ScheduleHistory,
    StoredEvent,
    Window,
)
from .invariant_report import Report, Violation
from .invariant_runs import (
    admit_order_of,
    alive_by_identity,
    calls_by_run,
    early_of,
    projection_of,
    sessions_of,
    stolen_of,
    unfinished_of,
)
from .invariant_schedules import due_subject, expected_due_times, paused_of, why_invented

__all__ = ["CHECKS", "EARLY_TOLERANCE", "Checker", "HandlerCall", "History", "Options",
           "Report", "StoredEvent", "Violation", "Window", "check"]

CHECKS: dict[str, str] = {
    "foreign": "a stored message that is not the scheduler's own (any stream or bucket)",
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
    "paging": "paging a deployment's history does not list every retained Run exactly once",
    "unexplained": "a due time with no Run while a replica ran and the Schedule was active",
}


# ----------------------------------------------------------------------------- the check


def check(history: History, options: Options | None = None) -> Report:
    """Run every check that the history and options allow; see the module docstring."""
    checker = Checker(history.prefix, history.schedules, history.leases, options,
                      account=history.account)
    for stored in history.runs:
        checker.feed(stored)
    return checker.finish(history.read_at).adding(history.foreign)


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
    before the first event is skipped, not reported; ``since``: the instant they start
    from. ``account``: the store's outages and reach (``invariant_account.py``); without,
    ``unexplained`` is not judged.
    """

    def __init__(self, prefix: str, schedules: Iterable[StoredEvent],
                 leases: Mapping[str, LeaseValue] | None = None,
                 options: Options | None = None, *, partial: bool = False,
                 since: datetime | None = None, account: AccountFacts | None = None) -> None:
        self._names = Names(prefix)
        self._options = options or Options()
        self._partial = partial
        schedule_events = list(schedules)
        self._schedules, self._found = _group_schedules(self._names, schedule_events)
        self._leases = leases or {}
        self._calls = calls_by_run(self._options.calls)
        self._open: dict[str, _Open] = {}
        self._seen: set[int] = set()
        """``hash()`` of the ID of every Run whose creation was read."""
        self._odd: dict[tuple[str, datetime], list[str]] = {}
        """Scheduled Runs whose ID is not the one derived from their due time (forged)."""
        self._since = since
        self._account = account
        self._histories = Histories({}, {})
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
            self._found.append(Violation("foreign", f"{stored.subject}#{stored.seq}",
                                         f"in {self._names.runs_stream}: {problem}"))
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
        self._histories.note(run.deployment_id, run.created_at)
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
        found += projection_of(run_id, state, options.ledger)
        first, created = events[0]
        if isinstance(created, RunCreated) and created.run.trigger == Trigger.SCHEDULE:
            run = created.run
            schedule = self._schedules.get(run.deployment_id, [])
            problem = why_invented(run, first, schedule, options)
            if problem:
                assert run.due_at is not None
                found.append(Violation("invented", due_subject(run.deployment_id, run.due_at),
                                       problem))
            found += paused_of(run, first, events, schedule, options.pause_visibility)
            found += early_of(run, events, options)
        calls = self._calls.pop(run_id, [])
        found += sessions_of(run_id, events, calls, options.clock_tolerance)
        found += admit_order_of(run_id, events, calls, options.clock_tolerance)
        found += stolen_of(run_id, events, alive_by_identity(options.windows),
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
            found += unfinished_of(run_id, current.state, current.events, self._leases, now,
                                    options.grace)
            self._close(run_id)
        found += self._due_times(now)
        if self._account is not None and options.ticker_only:
            found += unexplained_of(self._schedules, self._account, self._histories,
                                    lambda dep, due: self._has_run((dep, due)), now=now,
                                    since=self._since)
        found += self._unknown_in_ledger()
        for run_id, calls in self._calls.items():  # calls of Runs never read
            found += admit_order_of(run_id, [], calls, options.clock_tolerance)
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
                found.append(Violation("doubled", due_subject(*key),
                                       f"{len(ids)} runs: {', '.join(sorted(ids))}"))
        for key in expected_due_times(self._schedules, self._options, now):
            if not self._has_run(key):
                found.append(Violation("missed", due_subject(*key), "no run stored"))
        return found

    def _unknown_in_ledger(self) -> list[Violation]:
        ledger = self._options.ledger
        if ledger is None:
            return []
        return [Violation("projection", record.run_id, "in the ledger but no valid event stores it")
                for record in ledger.held() if hash(record.run_id) not in self._seen]


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
    foreign: list[Violation] = []
    where = f"in {names.schedules_stream}"
    for stored in stored_events:
        event = stored.event
        if event is None or not isinstance(event, ScheduleEvent):
            detail = (f"does not decode: {stored.error}" if event is None
                      else f"a {stored.type} event on a schedule subject")
            foreign.append(Violation("foreign", f"{stored.subject}#{stored.seq}",
                                     f"{where}: {detail}"))
            continue
        if stored.subject != _schedule_subject(names, event.schedule.deployment_id):
            foreign.append(Violation("foreign", f"{stored.subject}#{stored.seq}",
                                     f"{where}: names another deployment than its subject"))
            continue
        schedules.setdefault(event.schedule.deployment_id, []).append((stored, event))
    return schedules, foreign


def _schedule_subject(names: Names, deployment_id: str) -> str:
    try:
        return names.schedule_subject(deployment_id)
    except (ValueError, TypeError):
        return ""

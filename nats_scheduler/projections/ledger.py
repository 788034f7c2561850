"""The Run ledger: what one process keeps in memory about Runs, bounded whatever the history.

It holds three things, none of which grows with the number of Runs ever made:

- **every unfinished Run** (PENDING or DISPATCHING): the recovery sweep's work list. Seeded at
  start from the open-Run keys of the lease bucket, then kept current by the Run follower;
- **the most recently touched Runs** (at most ``recent_limit``): read-your-writes for
  ``get_run`` and for the first page of ``list_runs`` right after this process wrote;
- **a summary per deployment**: its newest Run, its newest scheduled Run and its FAILED Runs
  of the last day (at most ``MAX_FAILURES``), for the operator views and health signals.

The history itself is read from the server (:mod:`nats_scheduler.jetstream.history`). Both the
follower and the provider's own writes apply by stream sequence, so order and repetition do
not matter.

What the follower delivers is checked before it is applied (:meth:`Ledger.apply_event`):
writers append on the last sequence they saw, so when a newer event of a known Run arrives,
the state held is the one before it, and an event whose state does not follow from it
(``runcore.evolve``: forged, corrupt, an impossible transition) is refused and left to the
follower to skip and count. The first event seen of a Run (a projection starts from the
last event per subject) is taken as given: there is nothing to check it against.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import msgspec

from ..core.events import RunEventType, RunRecord
from ..core.runcore import TransitionError, evolve
from ..seam import RunState, Trigger

Listener = Callable[[RunRecord], None]

FAILURE_MEMORY = timedelta(hours=25)
"""How long a deployment's FAILED Runs stay in its summary (the views show the last 24 h)."""

MAX_FAILURES = 200
"""FAILED Runs kept per deployment summary; older ones are dropped first."""


class RunMark(msgspec.Struct, frozen=True, gc=False):
    """What a summary keeps of a deployment's newest Run: what the views show of it.

    Not the whole record (payload, notes, bookkeeping): one summary per deployment is held
    for every Schedule, so this is most of the ledger's memory at 100,000 Schedules
    (docs/benchmarks.md)."""

    run_id: str
    state: RunState
    trigger: Trigger
    created: float
    """``created_at`` as a POSIX timestamp (half a datetime's size)."""
    due: float | None

    @property
    def created_at(self) -> datetime:
        return datetime.fromtimestamp(self.created, UTC)

    @property
    def due_at(self) -> datetime | None:
        return None if self.due is None else datetime.fromtimestamp(self.due, UTC)

    @classmethod
    def of(cls, record: RunRecord) -> RunMark:
        due = record.due_at
        return cls(record.run_id, record.state, record.trigger, record.created_at.timestamp(),
                   None if due is None else due.timestamp())


@dataclass(slots=True)
class DeploymentSummary:
    """What the views need of one deployment's history, without the history."""

    last: RunMark | None = None
    last_scheduled: RunMark | None = None
    failures: dict[str, RunRecord] | None = None
    """FAILED Runs of the last day (None: none; most deployments have none)."""

    def note(self, record: RunRecord) -> None:
        mark: RunMark | None = None
        if self.last is None or _order(record) >= _order(self.last):
            self.last = mark = RunMark.of(record)
        if record.trigger == Trigger.SCHEDULE and (
                self.last_scheduled is None or _order(record) >= _order(self.last_scheduled)):
            self.last_scheduled = mark or RunMark.of(record)
        if record.state == RunState.FAILED:
            failures = self.failures
            if failures is None:
                failures = self.failures = {}
            failures[record.run_id] = record
            if len(failures) > MAX_FAILURES:
                oldest = min(failures.values(), key=lambda r: r.updated_at)
                del failures[oldest.run_id]

    def forget_before(self, cutoff: datetime) -> None:
        if not self.failures:
            return
        for run_id in [r for r, rec in self.failures.items() if rec.updated_at < cutoff]:
            del self.failures[run_id]
        if not self.failures:
            self.failures = None


def _order(record: RunRecord | RunMark) -> tuple[float, str]:
    created = record.created if isinstance(record, RunMark) else record.created_at.timestamp()
    return (created, record.run_id)


class Ledger:
    """Unfinished Runs, recently touched Runs and per-deployment summaries."""

    def __init__(self, recent_limit: int = 10_000) -> None:
        self._recent: OrderedDict[str, tuple[int, RunRecord]] = OrderedDict()
        self._recent_of: dict[str, set[str]] = {}  # deployment -> its run IDs in _recent
        self._unfinished: dict[str, tuple[int, RunRecord]] = {}
        self._summaries: dict[str, DeploymentSummary] = {}
        self._listeners: list[Listener] = []
        self._recent_limit = recent_limit
        self.created = 0
        """Runs this ledger saw created (first seen in state PENDING with no attempt)."""

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(record)`` after every change applied."""
        self._listeners.append(listener)

    def _known(self, run_id: str) -> tuple[int, RunRecord] | None:
        return self._unfinished.get(run_id) or self._recent.get(run_id)

    def apply(self, seq: int, record: RunRecord) -> bool:
        """Record ``record`` as of stream sequence ``seq``; older news is ignored."""
        known = self._known(record.run_id)
        if known is not None and known[0] >= seq:
            return False
        if known is None and record.attempts == 0 and record.state == RunState.PENDING:
            self.created += 1
        entry = (seq, record)
        if record.finished:
            self._unfinished.pop(record.run_id, None)
        else:
            self._unfinished[record.run_id] = entry
        self._recent[record.run_id] = entry
        self._recent.move_to_end(record.run_id)
        self._recent_of.setdefault(record.deployment_id, set()).add(record.run_id)
        while len(self._recent) > self._recent_limit:
            _, (_, evicted) = self._recent.popitem(last=False)
            ids = self._recent_of[evicted.deployment_id]
            ids.discard(evicted.run_id)
            if not ids:  # an empty set per deployment ever touched adds up (200 B each)
                del self._recent_of[evicted.deployment_id]
        summary = self._summaries.get(record.deployment_id)
        if summary is None:  # the key shared with the Schedule table's (sys.intern)
            summary = self._summaries[sys.intern(record.deployment_id)] = DeploymentSummary()
        summary.note(record)
        for listener in self._listeners:
            listener(record)
        return True

    def apply_event(self, seq: int, event: RunEventType, subject_ids: tuple[str, str]) -> bool:
        """Apply a followed event stored on the subject of ``subject_ids`` (deployment, run).

        Raises TransitionError (nothing applied) for an event of another Run than its
        subject's, or one that cannot follow the state held (see the module docstring).
        """
        run = event.run
        if subject_ids != (run.deployment_id, run.run_id):
            raise TransitionError(f"an event of run {run.run_id!r} on another run's subject")
        known = self._known(run.run_id)
        if known is not None and known[0] < seq:
            evolve(known[1], event)
        return self.apply(seq, run)

    def get(self, run_id: str) -> RunRecord | None:
        """A Run this process knows of right now (unfinished, or recently touched)."""
        entry = self._known(run_id)
        return entry[1] if entry else None

    def unfinished(self) -> list[RunRecord]:
        """Runs still PENDING or DISPATCHING, cluster-wide."""
        return [record for _, record in self._unfinished.values()]

    def known_runs(self, deployment_id: str) -> list[RunRecord]:
        """The deployment's Runs held in memory (unfinished and recently touched)."""
        runs = {run_id: self._recent[run_id][1]
                for run_id in self._recent_of.get(deployment_id, ())}
        runs.update((r.run_id, r) for _, r in self._unfinished.values()
                    if r.deployment_id == deployment_id)
        return list(runs.values())

    def summary(self, deployment_id: str) -> DeploymentSummary:
        """The deployment's newest Run and newest scheduled Run (empty when none is known)."""
        return self._summaries.get(deployment_id) or DeploymentSummary()

    def failures(self, since: datetime, deployment_id: str | None = None) -> list[RunRecord]:
        """FAILED Runs that changed at or after ``since`` (of one deployment, or of all)."""
        chosen = ([self._summaries[deployment_id]] if deployment_id in self._summaries
                  else [] if deployment_id is not None else list(self._summaries.values()))
        found = []
        for summary in chosen:
            summary.forget_before(since - FAILURE_MEMORY)
            found.extend(r for r in (summary.failures or {}).values() if r.updated_at >= since)
        return found

    def deployments(self) -> list[str]:
        return list(self._summaries)

    def count(self) -> int:
        """Runs held in memory right now (bounded by ``recent_limit`` plus the unfinished)."""
        return len(self._recent.keys() | self._unfinished.keys())

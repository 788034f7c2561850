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

from collections import OrderedDict
from collections.abc import Callable
from datetime import datetime

from ..core.events import RunEventType, RunRecord
from ..core.runcore import TransitionError, evolve
from ..seam import RunState
from .summaries import FAILURE_MEMORY, DeploymentSummary, RunMark, Summaries

Listener = Callable[[RunRecord], None]

__all__ = ["FAILURE_MEMORY", "DeploymentSummary", "Ledger", "RunMark"]


class Ledger:
    """Unfinished Runs, recently touched Runs and per-deployment summaries."""

    def __init__(self, recent_limit: int = 10_000, *,
                 shared_id: Callable[[str], str] | None = None) -> None:
        self._recent: OrderedDict[str, tuple[int, RunRecord]] = OrderedDict()
        self._unfinished: dict[str, tuple[int, RunRecord]] = {}
        self._summaries = Summaries(shared_id)
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
        while len(self._recent) > self._recent_limit:
            self._recent.popitem(last=False)
        self._summaries.note(seq, record)
        for listener in self._listeners:
            listener(record)
        return True

    def apply_history(self, seq: int, record: RunRecord) -> bool:
        """A Run read from the history (start-up, warm-up): an unfinished one, or a newer
        state of one held, is applied as :meth:`apply` does (the recovery sweep needs it);
        any other only updates its deployment's summary. A warm-up of the newest 50,000
        Runs thus leaves the recently touched Runs to those this process works on, instead
        of filling them with 10,000 records nobody asked for (docs/benchmarks.md)."""
        known = self._known(record.run_id)
        if known is not None and known[0] >= seq:
            return False
        if known is not None or not record.finished:
            return self.apply(seq, record)
        self._summaries.note(seq, record)
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

    def unfinished_count(self) -> int:
        """How many Runs are still PENDING or DISPATCHING (no list built: progress reports
        ask several times a second while a herd holds 100,000)."""
        return len(self._unfinished)

    def held(self) -> list[RunRecord]:
        """Every Run held in memory: the unfinished and the recently touched ones."""
        runs = {run_id: record for run_id, (_, record) in self._recent.items()}
        runs.update((run_id, record) for run_id, (_, record) in self._unfinished.items())
        return list(runs.values())

    def summary(self, deployment_id: str) -> DeploymentSummary:
        """The deployment's newest Run and newest scheduled Run (empty when none is known)."""
        return self._summaries.summary(deployment_id)

    def failures(self, since: datetime, deployment_id: str | None = None) -> list[RunRecord]:
        """FAILED Runs that changed at or after ``since`` (of one deployment, or of all)."""
        return self._summaries.failures(since, deployment_id)

    def summarised(self) -> int:
        """How many deployments have a summary."""
        return len(self._summaries)

    def count(self) -> int:
        """Runs held in memory right now (bounded by ``recent_limit`` plus the unfinished)."""
        return len(self._recent.keys() | self._unfinished.keys())

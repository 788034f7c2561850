"""The Run ledger: a projection of the Run events that answers list_runs and get_run.

It holds the latest state of every Run and, per deployment, the Runs' keys sorted by
``(created_at, run_id)``, so ``list_runs(limit=50)`` is a bisect plus a slice whatever the
length of the history, and it never rescans events. It also keeps the set of unfinished Runs
for the recovery sweep. It is fed by a :class:`~nats_scheduler.jetstream.follower.Follower`
and by the
provider's own writes (read-your-writes); both apply by stream sequence, so order and
repetition do not matter.

What the follower delivers is checked before it is applied (:meth:`Ledger.apply_event`):
writers append on the last sequence they saw, so when a newer event of a known Run arrives,
the state held is the one before it, and an event whose state does not follow from it
(``runcore.evolve``: forged, corrupt, an impossible transition) is refused and left to the
follower to skip and count. The first event seen of a Run (a projection starts from the
last event per subject) is taken as given: there is nothing to check it against.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from datetime import datetime

from ..core.events import RunEventType, RunRecord
from ..core.runcore import TransitionError, evolve

Key = tuple[datetime, str]
Listener = Callable[[RunRecord], None]


class Ledger:
    """Latest state per Run, ordered per deployment."""

    def __init__(self) -> None:
        self._runs: dict[str, tuple[int, RunRecord]] = {}
        self._by_deployment: dict[str, list[Key]] = {}
        self._unfinished: set[str] = set()
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(record)`` after every change applied."""
        self._listeners.append(listener)

    def apply(self, seq: int, record: RunRecord) -> bool:
        """Record ``record`` as of stream sequence ``seq``; older news is ignored."""
        known = self._runs.get(record.run_id)
        if known is not None and known[0] >= seq:
            return False
        self._runs[record.run_id] = (seq, record)
        if known is None:
            keys = self._by_deployment.setdefault(record.deployment_id, [])
            bisect.insort(keys, (record.created_at, record.run_id))
        if record.finished:
            self._unfinished.discard(record.run_id)
        else:
            self._unfinished.add(record.run_id)
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
        known = self._runs.get(run.run_id)
        if known is not None and known[0] < seq:
            evolve(known[1], event)
        return self.apply(seq, run)

    def get(self, run_id: str) -> RunRecord | None:
        entry = self._runs.get(run_id)
        return entry[1] if entry else None

    def page(self, deployment_id: str, limit: int, before: str | None = None) -> list[RunRecord]:
        """Up to ``limit`` Runs, newest first; with ``before``, only Runs older than it.

        Raises KeyError when ``before`` is not a Run of this deployment.
        """
        keys = self._by_deployment.get(deployment_id, [])
        end = len(keys)
        if before is not None:
            cursor = self._runs.get(before)
            if cursor is None or cursor[1].deployment_id != deployment_id:
                raise KeyError(before)
            end = bisect.bisect_left(keys, (cursor[1].created_at, before))
        start = max(0, end - limit)
        return [self._runs[run_id][1] for _, run_id in reversed(keys[start:end])]

    def unfinished(self) -> list[RunRecord]:
        """Runs still PENDING or DISPATCHING."""
        return [self._runs[r][1] for r in self._unfinished]

    def count(self, deployment_id: str | None = None) -> int:
        if deployment_id is None:
            return len(self._runs)
        return len(self._by_deployment.get(deployment_id, []))

    def deployments(self) -> list[str]:
        return list(self._by_deployment)

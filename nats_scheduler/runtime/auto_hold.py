"""Auto-hold: hold a Schedule whose scheduled Runs keep failing (opt-in).

With ``ASTRABOX_NATS_AUTO_HOLD_AFTER_FAILURES=N`` (0, the default, turns it off), a Schedule
is held once N of its scheduled Runs in a row have ended FAILED, by ``system``, the reason
naming the last error and the Runs (docs/operations.md, "Holds that end, and holds the
scheduler sets"). Runs already started go on; an operator's release starts the count again.

"In a row" is the order in which the Runs ended, as the Run events are stored: every replica
follows every Run event (the ledger), so each counts the same failures; a scheduled Run that
ends DISPATCHED ends the row, Run now and Replay count neither way, and any change of the
Schedule (a release, a hold, a new definition) starts the count again. The replica that
counts N asks for the hold; the hold is decided on the stored Schedule and appended on its
last sequence (``schedulecore.decide_auto_hold``), so when several replicas count N at
once one hold is stored, and a release stored meanwhile is never undone: the hold is only
written when the stored Schedule has not changed since the first counted Run was created.

What a replica counts lives in its memory, from its start: failures before it started are
not counted by it (another replica that ran then has them). A failing Schedule costs each
replica at most N records until its row ends.
"""

from __future__ import annotations

import asyncio
import logging

from ..clock import Clock
from ..core import schedulecore
from ..core.events import RunRecord, ScheduleEventType, ScheduleRecord
from ..ports.schedules import ScheduleJournal
from ..seam import RunState, Trigger
from .metrics import Metrics

log = logging.getLogger(__name__)


class AutoHold:
    """The failures in a row of each failing Schedule, and the hold when they reach N."""

    def __init__(self, after: int, schedules: ScheduleJournal, clock: Clock, identity: str, *,
                 metrics: Metrics | None = None) -> None:
        self.after = after
        self._schedules = schedules
        self._clock = clock
        self._identity = identity
        self._metrics = metrics or Metrics.disabled()
        self._rows: dict[str, list[RunRecord]] = {}
        """Deployment -> its scheduled Runs that ended FAILED in a row, oldest first."""
        self._holding: dict[str, asyncio.Task[None]] = {}
        self.held = 0
        """Holds this replica stored."""

    def failures(self, deployment_id: str) -> int:
        """How many scheduled Runs of the Schedule ended FAILED in a row, as counted here."""
        return len(self._rows.get(deployment_id, ()))

    @property
    def writing(self) -> int:
        """Holds this replica is writing now."""
        return len(self._holding)

    def run_changed(self, record: RunRecord) -> None:
        """A Run's new state (the ledger's listener): count a scheduled Run that ended."""
        if record.trigger != Trigger.SCHEDULE or not record.finished:
            return
        dep = record.deployment_id
        if record.state != RunState.FAILED:
            self._rows.pop(dep, None)  # a success ends the row
            return
        row = self._rows.setdefault(dep, [])
        if any(known.run_id == record.run_id for known in row):
            return
        row.append(record)
        del row[:-self.after]
        if len(row) >= self.after and dep not in self._holding:
            task = asyncio.get_running_loop().create_task(self._hold(dep, list(row)),
                                                          name=f"auto-hold {dep}")
            self._holding[dep] = task
            task.add_done_callback(lambda _t, dep=dep: self._holding.pop(dep, None))

    def schedule_changed(self, record: ScheduleRecord) -> None:
        """A change of the Schedule (the Schedule table's listener) starts the count again."""
        self._rows.pop(record.deployment_id, None)

    async def _hold(self, deployment_id: str, failed: list[RunRecord]) -> None:
        decided: list[object] = []

        def decide(current: ScheduleRecord | None) -> ScheduleEventType | None:
            event = schedulecore.decide_auto_hold(current, failed, now=self._clock.now(),
                                                  actor=self._identity)
            decided.append(event)
            return event

        try:
            await self._schedules.write(deployment_id, decide)
        except Exception:  # the next failure asks again
            log.warning("could not hold %s after %d failed Runs", deployment_id, len(failed),
                        exc_info=True)
            return
        if decided and decided[-1] is not None:
            self.held += 1
            self._metrics.auto_hold()
            log.warning("held %s: %d scheduled Runs in a row ended failed (last: %s)",
                        deployment_id, len(failed), failed[-1].run_id)

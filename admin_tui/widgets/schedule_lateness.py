"""A Schedule's own recent lateness, drawn as the Cluster view draws a replica's.

From its newest :data:`RUNS` Runs (one page of the history, read in a worker of this widget):
each scheduled Run's ``stored`` lateness is its due time to its creation, its ``started``
lateness its due time to the ``start_session`` call that gave it its Session (``started_at``,
recorded since schema 4: older Runs have none). Run now and Replay have no due time and are
left out. The screen asks for a reload when its Runs change (coalesced like its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from textual import work

from nats_scheduler.admin.api import AdminError, RunView
from nats_scheduler.seam import Trigger

from ..context import ConsoleContext
from .lateness_chart import LatenessChart

RUNS = 100


def run_lateness(runs: Sequence[RunView]) -> dict[str, list[float]]:
    """Per stage, the lateness of the scheduled Runs among ``runs`` (newest first), oldest
    first; a Run without a start time counts for ``stored`` only."""
    scheduled = [r for r in reversed(runs) if r.trigger == Trigger.SCHEDULE and r.due_at]
    stored = [max(0.0, (r.created_at - r.due_at).total_seconds())  # type: ignore[operator]
              for r in scheduled]
    started = [max(0.0, (r.started_at - r.due_at).total_seconds())  # type: ignore[operator]
               for r in scheduled if r.started_at is not None]
    return {"stored": stored, "started": started}


class ScheduleLateness(LatenessChart):
    """The lateness of one deployment's recent scheduled Runs (:func:`run_lateness`)."""

    def __init__(self, deployment_id: str, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.deployment_id = deployment_id

    def on_mount(self) -> None:
        self.reload()

    def reload(self) -> None:
        self._load()

    @work(group="lateness", exclusive=True, exit_on_error=False)
    async def _load(self) -> None:
        backend = cast(ConsoleContext, self.app).backend
        try:
            page = await backend.list_runs(self.deployment_id, limit=RUNS)
        except AdminError:
            return  # the Runs table beside it reports the failure; keep what is drawn
        self.show(run_lateness(page.runs), "scheduled Runs of this Schedule")

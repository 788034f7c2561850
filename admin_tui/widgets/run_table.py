"""A page of a Schedule's Runs, newest first."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from nats_scheduler.admin.api import RunView

from ..formatting import DASH, short_id, styled
from .keyed_table import Cell, KeyedTable

COLUMNS = (
    ("run", "Run", 12),
    ("state", "State", 11),
    ("trigger", "Trigger", 8),
    ("due", "Due (UTC)", 11),
    ("session", "Session", 12),
    ("attempts", "Att", 3),
    ("error", "Error", 18),
    ("replay", "Replay of", 12),
    ("by", "Requested by", 12),
)


def run_cells(run: RunView) -> list[Cell]:
    return [
        Text(short_id(run.run_id), style="cyan"),
        styled(run.state.value),
        Text(run.trigger.value),
        Text(run.due_at.strftime("%m-%d %H:%M")) if run.due_at else Text(DASH, style="dim"),
        Text(short_id(run.session_id)) if run.session_id else Text(DASH, style="dim"),
        Text(str(run.attempts)),
        Text(run.error or DASH, style="red" if run.error else "dim", overflow="ellipsis"),
        Text(short_id(run.replay_of)) if run.replay_of else Text(DASH, style="dim"),
        Text(run.requested_by or DASH, style="" if run.requested_by else "dim"),
    ]


class RunTable(KeyedTable):
    """Rows keyed by Run ID."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(COLUMNS, **kwargs)

    def show(self, runs: Sequence[RunView]) -> None:
        self.set_rows([(r.run_id, run_cells(r)) for r in runs])

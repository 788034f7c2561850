"""The live tail of events: one row per event, oldest at the top, newest appended."""

from __future__ import annotations

from rich.text import Text

from nats_scheduler.core import events as ev

from ..formatting import (
    DASH,
    clock_utc,
    event_deployment,
    event_run_id,
    event_summary,
    event_tag,
    short_id,
)
from .keyed_table import Cell, KeyedTable

COLUMNS = (
    ("at", "Time (UTC)", 10),
    ("type", "Type", 20),
    ("deployment", "Deployment", 18),
    ("run", "Run", 12),
    ("actor", "Actor", 14),
    ("summary", "Summary", None),
)

TAG_STYLES = {
    "run.failed": "bold red",
    "run.attempt_failed": "red",
    "run.dispatched": "green",
    "schedule.held": "bold yellow",
    "schedule.released": "yellow",
    "schedule.deleted": "dim",
}


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def event_cells(event: object) -> list[Cell]:
    tag = event_tag(event)
    at = getattr(event, "at", None)
    actor = getattr(event, "actor", "") or DASH
    run_id = event_run_id(event)
    style = TAG_STYLES.get(tag, "cyan" if tag.startswith("run.") else "magenta")
    return [
        Text(clock_utc(at), style="dim"),
        Text(tag, style=style),
        Text(_clip(event_deployment(event) or DASH, 18)),
        Text(short_id(run_id)) if run_id else Text(DASH, style="dim"),
        Text(_clip(actor, 14), style="dim"),
        Text(event_summary(event), overflow="ellipsis", no_wrap=True),
    ]


def event_types() -> list[str]:
    """Every event tag, for the type filter (read from the union, so new events appear)."""
    members = [*ev.RunEventType.__args__, *ev.ScheduleEventType.__args__]  # type: ignore[attr-defined]
    return [m.__struct_config__.tag for m in members]


class EventTable(KeyedTable):
    """Rows keyed by the console's event number."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(COLUMNS, **kwargs)

    def append(self, seq: int, event: object, *, limit: int) -> None:
        self.add_row(*event_cells(event), key=str(seq))
        while self.row_count > limit:
            self.remove_row(self.ordered_rows[0].key)

"""The live tail of events: one row per event, oldest at the top, newest appended.

A :class:`VirtualTable` over the Events view's :class:`~admin_tui.event_tail.EventTail`:
appending a batch adds its keys, the oldest rows go in one slice, and only the rows on
screen build cells. (A DataTable built every row's cells and removed the oldest row one at
a time, each removal walking every row: under a herd that was most of the console's time.)
"""

from __future__ import annotations

from rich.text import Text

from nats_scheduler.core import events as ev

from ..event_tail import EventTail
from ..formatting import (
    DASH,
    clock_utc,
    event_deployment,
    event_run_id,
    event_summary,
    event_tag,
    short_id,
)
from .virtual_table import VirtualTable

SUMMARY_WIDTH = 120
"""Wider than the screen: the summary scrolls sideways; longer ones end in an ellipsis
(Enter shows the whole event)."""

COLUMNS = (
    ("at", "Time (UTC)", 10),
    ("type", "Type", 20),
    ("deployment", "Deployment", 18),
    ("run", "Run", 12),
    ("actor", "Actor", 14),
    ("summary", "Summary", SUMMARY_WIDTH),
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


def event_cells(event: object) -> list[Text]:
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


class EventTable(VirtualTable):
    """Rows keyed by the console's event number, drawn from the tail they show."""

    def __init__(self, tail: EventTail, **kwargs: object) -> None:
        super().__init__(COLUMNS, self._cells, **kwargs)
        self.tail = tail

    def show(self, keys: list[str], *, follow: bool) -> None:
        """Show exactly the rows ``keys`` (a filter changed, or the view is shown again)."""
        self.set_rows(keys)
        if follow:
            self.move_cursor(self.row_count - 1)

    def extend_tail(self, keys: list[str], *, follow: bool) -> None:
        """Append ``keys`` and drop the rows the tail no longer keeps (they are the oldest:
        only as many are looked at as go)."""
        rows, drop = self._keys, 0
        while drop < len(rows) and not self.tail.is_kept(rows[drop]):
            drop += 1
        self.append_rows(keys, drop=drop, follow=follow)

    def _cells(self, key: str) -> list[Text]:
        event = self.tail.get(key)
        return [Text("")] * len(COLUMNS) if event is None else event_cells(event)

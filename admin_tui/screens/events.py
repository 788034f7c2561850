"""The live tail of events, filterable by deployment and type; Enter shows an event's JSON."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import Footer, Input, Label, Select

from ..dialogs.event_json import EventJsonDialog
from ..formatting import event_deployment, event_tag
from ..messages import BackendEvent
from ..widgets.event_table import EventTable, event_cells, event_types
from ..widgets.top_bar import TopBar
from .base import ConsoleScreen

TAIL_LIMIT = 1000
"""Rows kept in the tail; the app keeps the same number of events."""

FAMILIES = [("all events", ""), ("run.*", "run."), ("schedule.*", "schedule.")]


def type_options() -> list[tuple[str, str]]:
    return FAMILIES + [(tag, tag) for tag in event_types()]


def event_matches(event: object, deployment: str, kind: str) -> bool:
    """``deployment``: substring of the deployment ID; ``kind``: a tag or a family prefix."""
    dep = (event_deployment(event) or "").lower()
    tag = event_tag(event)
    if deployment and deployment.lower() not in dep:
        return False
    if kind.endswith("."):
        return tag.startswith(kind)
    return not kind or tag == kind


class EventsScreen(ConsoleScreen):
    AUTO_FOCUS = "#events"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "expand", "Expand", priority=True),
        Binding("slash", "filter", "Filter deployment"),
        Binding("t", "type_filter", "Filter type"),
        Binding("f", "follow", "Follow"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(self) -> None:
        super().__init__(id="events-screen")
        self.follow = True
        self._events: dict[str, object] = {}

    def compose(self) -> ComposeResult:
        yield TopBar("Events: live tail", tab="events")
        with Horizontal(id="filter-bar"):
            yield Input(placeholder="/ filter by deployment ID", id="filter")
            yield Select(type_options(), value="", allow_blank=False, id="type-filter")
            yield Label("", id="follow-label")
        yield EventTable(id="events")
        yield Footer()

    def on_mount(self) -> None:
        self.rebuild()

    # ------------------------------------------------------------------ data

    def on_backend_event(self, message: BackendEvent) -> None:
        """No reload: the event itself is the row."""
        self._events[str(message.seq)] = message.event
        while len(self._events) > TAIL_LIMIT:
            self._events.pop(next(iter(self._events)))
        if event_matches(message.event, *self._filters()):
            table = self.query_one(EventTable)
            table.append(message.seq, message.event, limit=TAIL_LIMIT)
            self._follow(table)

    def _filters(self) -> tuple[str, str]:
        kind = self.query_one("#type-filter", Select).value
        return self.query_one("#filter", Input).value.strip(), str(kind or "")

    def rebuild(self) -> None:
        """Re-fill the tail from the app's buffer (on mount and when a filter changes)."""
        if not self._events:
            self._events = {str(seq): e for seq, e in self.console.recent_events()}
        deployment, kind = self._filters()
        table = self.query_one(EventTable)
        table.set_rows([(seq, event_cells(e)) for seq, e in self._events.items()
                        if event_matches(e, deployment, kind)])
        self._follow(table)
        self.repaint()

    def _follow(self, table: EventTable) -> None:
        if self.follow and table.row_count:
            table.move_cursor(row=table.row_count - 1, animate=False)

    def repaint(self) -> None:
        state = "following" if self.follow else "paused (f to follow)"
        shown = self.query_one(EventTable).row_count
        self.query_one("#follow-label", Label).update(f"{shown} events · {state}")

    def on_input_changed(self, event: Input.Changed) -> None:
        self.rebuild()

    def on_select_changed(self, event: Select.Changed) -> None:
        self.rebuild()

    # ------------------------------------------------------------------ actions

    def action_expand(self) -> None:
        table = self.query_one(EventTable)
        if not table.has_focus:
            table.focus()
            return
        key = table.selected_key
        if key is not None and key in self._events:
            self.app.push_screen(EventJsonDialog(self._events[key]))

    def action_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_type_filter(self) -> None:
        self.query_one("#type-filter", Select).focus()

    def action_clear_filter(self) -> None:
        self.query_one("#filter", Input).value = ""
        self.query_one("#type-filter", Select).value = ""
        self.query_one(EventTable).focus()

    def action_follow(self) -> None:
        self.follow = not self.follow
        self._follow(self.query_one(EventTable))
        self.repaint()

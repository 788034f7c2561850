"""The live tail of events, filterable by deployment and type; Enter shows an event's JSON.

The view keeps the newest :data:`TAIL_LIMIT` events (an :class:`EventTail`) whether shown or
not; its table (a :class:`VirtualTable`) is only touched while the view is shown: the
matching rows of the live feed's batches are appended together after the screens' short
coalescing delay (``debounce``: a herd's tail scrolls a few times a second, not twenty),
dropping the rows the tail forgot. Hidden, the view only takes the events in, and rebuilds
its rows once when shown again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import Footer, Input, Label, Select

from ..dialogs.event_json import EventJsonDialog
from ..event_tail import TAIL_LIMIT, EventTail
from ..formatting import event_deployment, event_tag
from ..messages import FeedItem
from ..widgets.event_table import EventTable, event_types
from ..widgets.steady import update_changed
from ..widgets.top_bar import TopBar
from .base import ConsoleScreen

__all__ = ["TAIL_LIMIT", "EventsScreen", "event_matches", "type_options"]

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
        self.tail = EventTail(TAIL_LIMIT)
        self._stale = False
        """Events came while hidden: the rows are rebuilt when shown."""
        self._pending: list[str] = []
        """Rows matching the filters, taken in since the table was last extended."""

    def compose(self) -> ComposeResult:
        yield TopBar("Events: live tail", tab="events")
        with Horizontal(id="filter-bar"):
            yield Input(placeholder="/ filter by deployment ID", id="filter")
            yield Select(type_options(), value="", allow_blank=False, id="type-filter")
            yield Label("", id="follow-label")
        yield EventTable(self.tail, id="events")
        yield Footer()

    def on_mount(self) -> None:
        self.tail.extend(self.console.recent_events())
        self.rebuild()

    # ------------------------------------------------------------------ data

    def absorb_batch(self, events: Sequence[FeedItem]) -> set[str | None]:
        """No I/O: the events themselves are the rows. Hidden: only the tail moves."""
        added = self.tail.extend(events)
        if not added:
            return set()
        if not self.shown:
            self._stale = True
            return set()
        deployment, kind = self._filters()
        self._pending.extend(key for key, event in added
                             if event_matches(event, deployment, kind))
        if len(self._pending) > TAIL_LIMIT:
            del self._pending[:-TAIL_LIMIT]
        return {"tail"}

    def reload(self, dirty: set[str | None] | None) -> None:
        """The coalesced batches: their rows appended, the forgotten ones dropped."""
        if dirty is None or "tail" not in dirty:
            return
        keys = [key for key in self._pending if self.tail.is_kept(key)]
        self._pending = []
        self.query_one(EventTable).extend_tail(keys, follow=self.follow)
        self.repaint()

    def catch_up(self) -> None:
        if self._stale:
            self.rebuild()
        super().catch_up()

    def _filters(self) -> tuple[str, str]:
        kind = self.query_one("#type-filter", Select).value
        return self.query_one("#filter", Input).value.strip(), str(kind or "")

    def rebuild(self) -> None:
        """Re-fill the rows from the tail (on mount, when a filter changes, when shown)."""
        self._stale = False
        self._pending = []
        deployment, kind = self._filters()
        self.query_one(EventTable).show(
            [key for key, event in self.tail.items() if event_matches(event, deployment, kind)],
            follow=self.follow)
        self.repaint()

    def repaint(self) -> None:
        state = "following" if self.follow else "paused (f to follow)"
        shown = self.query_one(EventTable).row_count
        update_changed(self.query_one("#follow-label", Label), f"{shown} events · {state}")

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
        event = self.tail.get(table.selected_key)
        if event is not None:
            self.app.push_screen(EventJsonDialog(event))

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
        table = self.query_one(EventTable)
        if self.follow:
            table.move_cursor(table.row_count - 1)
        self.repaint()

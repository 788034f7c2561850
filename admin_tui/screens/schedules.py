"""The Schedules screen: every Schedule, live, sortable and filterable; the home screen."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import DataTable, Footer, Input, Label

from nats_scheduler.admin.api import ScheduleView
from nats_scheduler.core import events as ev
from nats_scheduler.core.events import ScheduleRecord

from ..actions import OperatorActions
from ..live import merge_schedule
from ..messages import ActionOutcome, SchedulesLoaded
from ..widgets.schedule_summary import ScheduleSummary
from ..widgets.schedule_table import HealthFlags, ScheduleTable
from ..widgets.top_bar import TopBar
from .schedule_detail import ScheduleDetailScreen

_FAR = datetime.max.replace(tzinfo=UTC)
_STATE_ORDER = {"held": 0, "enabled": 1, "disabled": 2, "deleted": 3}

SORTS: dict[str, tuple[str, object]] = {
    "name": ("name", lambda s: (s.name.lower(), s.deployment_id)),
    "next": ("next due", lambda s: (s.next_due[0] if s.next_due and s.state == "enabled"
                                    else _FAR, s.name.lower())),
    "state": ("state", lambda s: (_STATE_ORDER.get(s.state, 9), s.name.lower())),
    "failures": ("failures", lambda s: (-s.failures_24h, s.name.lower())),
    "last": ("last run", lambda s: (-(s.last_run_at.timestamp() if s.last_run_at else 0),
                                    s.name.lower())),
}


def matches(schedule: ScheduleView, text: str) -> bool:
    """The admin service's filter: a case-insensitive substring of the ID or the name."""
    needle = text.strip().lower()
    return not needle or needle in schedule.deployment_id.lower() or needle in \
        schedule.name.lower()


class SchedulesScreen(OperatorActions):
    AUTO_FOCUS = "#schedules"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "Open", priority=True),
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("s", "sort", "Sort"),
        Binding("h", "hold", "Hold"),
        Binding("u", "release", "Release"),
        Binding("H", "hold_bulk", "Hold filtered"),
        Binding("U", "release_bulk", "Release filtered"),
        Binding("r", "run_now", "Run now"),
    ]

    def __init__(self) -> None:
        super().__init__(id="schedules-screen")
        self.schedules: list[ScheduleView] = []
        self._pushed: dict[str, ScheduleRecord] = {}
        self.loaded = False
        self.sort_key = "name"
        self.sort_reverse = False

    def compose(self) -> ComposeResult:
        yield TopBar("Schedules", tab="schedules")
        with Horizontal(id="filter-bar"):
            yield Input(placeholder="/ filter by deployment ID or name", id="filter")
            yield Label("", id="sort-label")
        yield ScheduleTable(id="schedules")
        yield ScheduleSummary(id="summary")
        yield Footer()

    def on_mount(self) -> None:
        self.watch(self.app, "health", lambda _h: self.repaint(), init=False)

    # ------------------------------------------------------------------ data

    def absorb(self, event: object) -> set[str | None]:
        if isinstance(event, ev.ScheduleEvent):
            self._pushed[event.schedule.deployment_id] = event.schedule
            return {None}
        if isinstance(event, ev.RunEvent):
            return {None}
        return set()

    def reload(self, dirty: set[str | None] | None) -> None:
        if self.loaded:
            self.repaint()
        self._load()

    @work(group="load", exclusive=True, exit_on_error=False)
    async def _load(self) -> None:
        schedules = await self.guarded("Loading Schedules", self.console.backend.list_schedules())
        if schedules is not None:
            self.post_message(SchedulesLoaded(schedules))

    def on_schedules_loaded(self, message: SchedulesLoaded) -> None:
        self.schedules = message.schedules
        self.loaded = True
        self.repaint()

    def show_outcome(self, outcome: ActionOutcome) -> None:
        if outcome.schedule is not None:
            new = outcome.schedule
            self.schedules = [new if s.deployment_id == new.deployment_id else s
                              for s in self.schedules]
            self.repaint()
        elif outcome.bulk is not None:
            self.reload(None)

    # ------------------------------------------------------------------ rendering

    @property
    def filter_text(self) -> str:
        return self.query_one("#filter", Input).value.strip()

    def visible(self) -> list[ScheduleView]:
        _, key = SORTS[self.sort_key]
        merged = [merge_schedule(s, self._pushed.get(s.deployment_id)) for s in self.schedules]
        shown = [s for s in merged if matches(s, self.filter_text) and s.state != "deleted"]
        return sorted(shown, key=key, reverse=self.sort_reverse)  # type: ignore[arg-type]

    def repaint(self) -> None:
        now = self.console.clock.now()
        flags = HealthFlags.of(self.console.health)
        visible = self.visible()
        table = self.query_one(ScheduleTable)
        table.show(visible, flags, now)
        label, _ = SORTS[self.sort_key]
        arrow = "▼" if self.sort_reverse else "▲"
        count = f"{len(visible)} of {len(self.schedules)}" if self.filter_text else \
            f"{len(self.schedules)}"
        self.query_one("#sort-label", Label).update(
            f"{count} Schedules · sort: {label} {arrow}" if self.loaded else "loading…")
        self.query_one(ScheduleSummary).show(self.selected_schedule(), flags, now)

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self.query_one(ScheduleSummary).show(
            self.selected_schedule(), HealthFlags.of(self.console.health),
            self.console.clock.now())

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.repaint()

    # ------------------------------------------------------------------ actions

    def selected_schedule(self) -> ScheduleView | None:
        key = self.query_one(ScheduleTable).selected_key
        found = next((s for s in self.schedules if s.deployment_id == key), None)
        return None if found is None else merge_schedule(found, self._pushed.get(key or ""))

    def bulk_filter(self) -> str:
        return self.filter_text

    def action_open(self) -> None:
        table = self.query_one(ScheduleTable)
        if not table.has_focus:
            table.focus()
            return
        schedule = self.selected_schedule()
        if schedule is not None:
            self.app.push_screen(ScheduleDetailScreen(schedule.deployment_id))

    def action_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        self.query_one(ScheduleTable).focus()

    def action_sort(self) -> None:
        """Cycle the sort column; a second full cycle flips the order."""
        keys = list(SORTS)
        index = keys.index(self.sort_key) + 1
        if index == len(keys):
            self.sort_reverse = not self.sort_reverse
        self.sort_key = keys[index % len(keys)]
        self.repaint()

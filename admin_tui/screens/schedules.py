"""The Schedules screen: every Schedule, live, sortable and filterable; the home screen.

Built for 100,000 Schedules: the Schedules live in a :class:`ScheduleModel` (filter and sort
there, not on widget rows), the table draws only the rows on screen, the list loads page by
page (the first screenful shows while the rest arrives, the label counts what is loaded) and
live events are folded into the model without reloading the list.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import Footer, Input, Label

from nats_scheduler.admin.api import ScheduleView
from nats_scheduler.core import events as ev

from ..actions import OperatorActions, bulk_progress
from ..messages import ActionOutcome, BulkTally, SchedulesPage
from ..schedule_model import SORTS, ScheduleModel, needle_of
from ..widgets.schedule_summary import ScheduleSummary
from ..widgets.schedule_table import HealthFlags, ScheduleTable
from ..widgets.steady import update_changed
from ..widgets.top_bar import TopBar
from ..widgets.virtual_table import VirtualTable
from .schedule_detail import ScheduleDetailScreen

LOADING_REPAINT = 0.5
"""While the list loads, the table is redrawn at most this often (seconds): each page only
adds to the model, and the label counts it."""

LOADING_PAINT_SHARE = 10
"""While the list loads, at least this many times a redraw's own duration passes between
redraws: a redraw sorts every Schedule loaded so far (a second at a million), and one every
half second made loading a million Schedules take six minutes instead of one."""


def matches(schedule: ScheduleView, text: str) -> bool:
    """The admin service's filter: a case-insensitive substring of the ID or the name."""
    needle = needle_of(text)
    return not needle or needle in schedule.deployment_id.casefold() or needle in \
        schedule.name.casefold()


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
        Binding("c", "cancel_bulk", "Cancel bulk action"),
    ]

    def __init__(self) -> None:
        super().__init__(id="schedules-screen")
        self.model = ScheduleModel()
        self.loaded = False
        """The first page arrived (rows can be shown)."""
        self.complete = False
        """Every page of the latest load arrived."""
        self._load_number = 0
        self._seen: set[str] = set()
        self._changed: set[str] = set()
        """Schedules whose rows changed since the last paint (collected while shown)."""
        self._painted = 0.0
        self._paint_seconds = 0.0
        """How long the last redraw took (loading redraws less often as it grows)."""
        self.first_rows_after: int | None = None
        """How many Schedules were loaded when the table first showed rows."""

    @property
    def schedules(self) -> list[ScheduleView]:
        """Every loaded Schedule (deleted ones included), in no particular order."""
        return self.model.views()

    @property
    def sort_key(self) -> str:
        return self.model.sort_key

    @property
    def sort_reverse(self) -> bool:
        return self.model.sort_reverse

    def compose(self) -> ComposeResult:
        yield TopBar("Schedules", tab="schedules")
        with Horizontal(id="filter-bar"):
            yield Input(placeholder="/ filter by deployment ID or name", id="filter")
            yield Label("", id="sort-label")
            yield Label("", id="bulk-label")
        yield ScheduleTable(id="schedules")
        yield ScheduleSummary(id="summary")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#bulk-label", Label).display = False
        self.watch(self.app, "health", self._health_changed, init=False)

    def _health_changed(self, _health: object) -> None:
        """The flags are read when painting: hidden, the repaint on resume shows them."""
        if self.shown:
            self.repaint()

    # ------------------------------------------------------------------ data

    def absorb(self, event: object) -> set[str | None]:
        """Fold the event into the model now; a repaint of the rows it changed follows
        (coalesced), no reload."""
        if isinstance(event, ev.ScheduleEvent):
            dep = event.schedule.deployment_id
            changed = self.model.schedule_record(event.schedule, self.console.clock.now())
        elif isinstance(event, ev.RunEvent):
            dep = event.run.deployment_id
            changed = self.model.run_record(event.run, failed=isinstance(event, ev.RunFailed))
        else:
            return set()
        if not changed:
            return set()
        if self.shown:  # hidden, the repaint when shown draws every row anyway
            self._changed.add(dep)
        return {"rows"}

    def reload(self, dirty: set[str | None] | None) -> None:
        if dirty is not None:
            self._paint(self._changed)
            return
        if self.loaded:
            self.repaint()
        self.model.counted_until = self.console.clock.now()
        self._load_number += 1
        self._load(self._load_number)

    def _pages(self) -> AsyncIterator[list[ScheduleView]]:
        backend = self.console.backend
        pages = getattr(backend, "schedule_pages", None)
        if pages is not None:
            return pages()  # type: ignore[no-any-return]
        return _one_page(backend.list_schedules())

    @work(group="load", exclusive=True, exit_on_error=False)
    async def _load(self, number: int) -> None:
        first = True
        pages = self._pages()
        try:
            while True:
                page = await self.guarded("Loading Schedules", _next(pages))
                if page is None:
                    return
                views, last = page
                self.post_message(SchedulesPage(views, load=number, first=first, last=last))
                first = False
                if last:
                    return
        finally:
            await pages.aclose()  # type: ignore[attr-defined]

    def on_schedules_page(self, message: SchedulesPage) -> None:
        if message.load != self._load_number:
            return
        if message.first:
            self._seen = set()
            self.complete = False
        self._seen.update(v.deployment_id for v in message.schedules)
        self.model.load(message.schedules)
        if message.last:
            self.model.retain(self._seen)
            self._seen = set()
            self.complete = True
        first_rows = not self.loaded
        self.loaded = True
        if not self.shown:
            return  # the model has the page; catch_up paints it when shown
        pause = max(LOADING_REPAINT, LOADING_PAINT_SHARE * self._paint_seconds)
        if first_rows or message.last or time.monotonic() - self._painted > pause:
            self.repaint()
        else:
            self._label()

    def show_outcome(self, outcome: ActionOutcome) -> None:
        if outcome.schedule is not None:
            self.model.put(outcome.schedule)
            self.repaint()

    # ------------------------------------------------------------------ rendering

    @property
    def filter_text(self) -> str:
        return self.query_one("#filter", Input).value.strip()

    def visible(self) -> list[ScheduleView]:
        """The rows shown, in order (every one of them: for tests and bulk previews)."""
        return self.model.matching(self.filter_text)

    def repaint(self) -> None:
        self._paint(None)

    def _paint(self, changed: set[str] | None) -> None:
        """Show the rows; ``changed``: only these Schedules changed since the last paint
        (None: draw every visible row, e.g. for the relative times)."""
        began = time.monotonic()
        now = self.console.clock.now()
        flags = HealthFlags.of(self.console.health)
        rows = self.model.rows(self.filter_text)
        if rows and self.first_rows_after is None:
            self.first_rows_after = len(self.model)
        self._changed = set()
        self.query_one(ScheduleTable).show(self.model, rows, flags, now, changed=changed)
        self._label(len(rows))
        self.query_one(ScheduleSummary).show(self.selected_schedule(), flags, now)
        self._painted = time.monotonic()
        self._paint_seconds = self._painted - began

    def _label(self, shown: int | None = None) -> None:
        label = self.query_one("#sort-label", Label)
        if not self.loaded:
            update_changed(label, "loading…")
            return
        if shown is None:
            shown = self.query_one(ScheduleTable).row_count
        total = self.model.live_count
        sort, _ = SORTS[self.sort_key]
        arrow = "▼" if self.sort_reverse else "▲"
        count = f"{shown:,} of {total:,}" if self.filter_text else f"{total:,}"
        more = "" if self.complete else f" (loading… {len(self.model):,} loaded)"
        update_changed(label, f"{count} Schedules{more} · sort: {sort} {arrow}")

    def on_virtual_table_cursor_moved(self, _event: VirtualTable.CursorMoved) -> None:
        self.query_one(ScheduleSummary).show(
            self.selected_schedule(), HealthFlags.of(self.console.health),
            self.console.clock.now())

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.repaint()

    # ------------------------------------------------------------------ actions

    def selected_schedule(self) -> ScheduleView | None:
        return self.model.get(self.query_one(ScheduleTable).selected_key)

    def bulk_filter(self) -> str:
        return self.filter_text

    def bulk_matching(self, text: str) -> list[ScheduleView] | None:
        """Every loaded Schedule matching ``text`` once the list is complete (else None:
        ask the backend)."""
        return self.model.matching(text) if self.complete else None

    def show_bulk(self, tally: BulkTally, *, finished: bool) -> None:
        label = self.query_one("#bulk-label", Label)
        label.display = not finished
        label.update(bulk_progress(tally))

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
        reverse = not self.sort_reverse if index == len(keys) else self.sort_reverse
        self.model.set_sort(keys[index % len(keys)], reverse)
        self.repaint()


async def _one_page(call: object) -> AsyncIterator[list[ScheduleView]]:
    """A backend without pages: its whole list as one page."""
    yield await call  # type: ignore[misc]


async def _next(pages: AsyncIterator[list[ScheduleView]]) -> tuple[list[ScheduleView], bool]:
    """The next page and whether it is the last (one page read ahead would cost a round
    trip before the first rows; instead the end is the iterator's end, an empty page)."""
    try:
        return await anext(pages), False
    except StopAsyncIteration:
        return [], True

"""One Schedule: its definition, its next 10 due times (DST marked), its recent lateness
drawn, its past due times each with its Run or why there is none, and its Runs; the last
two paged."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.widgets import DataTable, Footer, Label

from nats_scheduler.admin.api import DueAccount, RunList, RunView, ScheduleDetail, ScheduleView
from nats_scheduler.core import events as ev

from ..actions import OperatorActions
from ..live import merge_schedule, newest_run
from ..messages import ActionOutcome, DetailLoaded, DueTimesLoaded, RunsLoaded
from ..widgets.definition import DefinitionPanel
from ..widgets.past_due import PastDueTable
from ..widgets.run_summary import RunSummary
from ..widgets.run_table import RunTable
from ..widgets.schedule_lateness import ScheduleLateness
from ..widgets.top_bar import TopBar
from ..widgets.upcoming import UpcomingTable
from .base import PAINT

PAGE_SIZE = 20
DUE_PAGE_SIZE = 12
"""Past due times per page, newest first."""
DUE_WINDOW = timedelta(days=7)
"""How far back the past due times go: a week shows a daily Schedule's recent story."""


class ScheduleDetailScreen(OperatorActions):
    AUTO_FOCUS = "#runs"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "Back"),
        Binding("h", "hold", "Hold"),
        Binding("u", "release", "Release"),
        Binding("r", "run_now", "Run now"),
        Binding("R", "replay", "Replay run"),
        Binding("left_square_bracket", "newer", "Newer"),
        Binding("right_square_bracket", "older", "Older"),
        Binding("less_than_sign", "newer_due", "Newer due"),
        Binding("greater_than_sign", "older_due", "Older due"),
    ]

    def __init__(self, deployment_id: str, *, page_size: int = PAGE_SIZE,
                 due_page_size: int = DUE_PAGE_SIZE) -> None:
        super().__init__(classes="detail-screen")
        self.deployment_id = deployment_id
        self.page_size = page_size
        self.due_page_size = due_page_size
        self.detail: ScheduleDetail | None = None
        self.page: RunList | None = None
        self.cursors: list[str | None] = [None]
        """The ``before`` cursor of every page from the newest to the one shown."""
        self.due_page: DueAccount | None = None
        self.due_cursors: list[datetime | None] = [None]
        """The same for the pages of past due times."""
        self._pushed_runs: dict[str, RunView] = {}
        self._pushed_schedule: ev.ScheduleRecord | None = None

    def compose(self) -> ComposeResult:
        yield TopBar(f"Schedules › {self.deployment_id}", tab="schedules")
        with Horizontal(id="detail-top"):
            yield DefinitionPanel(id="definition")
            yield UpcomingTable(id="upcoming")
        yield ScheduleLateness(self.deployment_id, id="schedule-lateness")
        yield PastDueTable(id="past-due")
        yield Label("", id="runs-title")
        yield RunTable(id="runs")
        yield RunSummary(id="run-summary")
        yield Footer()

    # ------------------------------------------------------------------ data

    def absorb(self, event: object) -> set[str | None]:
        if isinstance(event, ev.ScheduleEvent):
            if event.schedule.deployment_id != self.deployment_id:
                return set()
            self._pushed_schedule = event.schedule
            return {"detail"}
        if isinstance(event, ev.RunEvent) and event.run.deployment_id == self.deployment_id:
            # The event carries the Run's new state: show it now, reload the page after.
            self._pushed_runs[event.run.run_id] = event.run
            return {"detail", "runs", "due", PAINT}
        return set()

    def reload(self, dirty: set[str | None] | None) -> None:
        if dirty is None or "detail" in dirty:
            self._load_detail()
            self._load_due(self.due_cursors[-1])  # a change of the Schedule changes it too
        if dirty is None or "runs" in dirty:
            self._load_runs(self.cursors[-1])
            if dirty is not None:  # mounting loads it by itself
                self.query_one(ScheduleLateness).reload()
        elif "due" in dirty:
            self._load_due(self.due_cursors[-1])

    @work(group="detail", exclusive=True, exit_on_error=False)
    async def _load_detail(self) -> None:
        detail = await self.guarded(
            "Loading the Schedule", self.console.backend.get_schedule(self.deployment_id))
        if detail is not None:
            self.post_message(DetailLoaded(detail))

    @work(group="runs", exclusive=True, exit_on_error=False)
    async def _load_runs(self, before: str | None) -> None:
        runs = await self.guarded("Loading Runs", self.console.backend.list_runs(
            self.deployment_id, limit=self.page_size, before=before))
        if runs is not None:
            self.post_message(RunsLoaded(runs, before))

    @work(group="due", exclusive=True, exit_on_error=False)
    async def _load_due(self, before: datetime | None) -> None:
        since = self.console.clock.now() - DUE_WINDOW
        if self.due_page is not None and before is not None:
            since = self.due_page.since  # the pages of one window
        account = await self.guarded("Loading past due times", self.console.backend.explain(
            self.deployment_id, since=since, before=before, limit=self.due_page_size))
        if account is not None:
            self.post_message(DueTimesLoaded(account, before))

    def on_due_times_loaded(self, message: DueTimesLoaded) -> None:
        if message.page_before != self.due_cursors[-1]:
            return  # an answer for a page the operator already left
        self.due_page = message.account
        self.repaint()

    def on_detail_loaded(self, message: DetailLoaded) -> None:
        self.detail = message.detail
        self.repaint()

    def on_runs_loaded(self, message: RunsLoaded) -> None:
        if message.page_before != self.cursors[-1]:
            return  # an answer for a page the operator already left
        self.page = message.runs
        self.repaint()

    def show_outcome(self, outcome: ActionOutcome) -> None:
        if outcome.schedule is not None and self.detail is not None:
            self.detail = ScheduleDetail(schedule=outcome.schedule,
                                         upcoming=self.detail.upcoming,
                                         dst_notes=self.detail.dst_notes)
            self.repaint()
        if outcome.run is not None and outcome.run.deployment_id == self.deployment_id:
            self._pushed_runs.setdefault(outcome.run.run_id, outcome.run)
            if len(self.cursors) > 1:
                self.cursors = [None]
            self.repaint()
            self.query_one(RunTable).select_key(outcome.run.run_id)
            self.reload({"detail", "runs"})

    # ------------------------------------------------------------------ rendering

    def runs(self) -> list[RunView]:
        """The page, with pushed Run states folded in; on the newest page, new Runs on top."""
        loaded = list(self.page.runs) if self.page else []
        known = {r.run_id for r in loaded}
        shown = [newest_run(r, self._pushed_runs.get(r.run_id)) for r in loaded]
        if len(self.cursors) == 1:
            newest = loaded[0].created_at if loaded else None
            fresh = [r for r in self._pushed_runs.values() if r.run_id not in known
                     and (newest is None or r.created_at >= newest)]
            fresh.sort(key=lambda r: (r.created_at, r.run_id), reverse=True)
            shown = fresh + shown
        return shown

    def repaint(self) -> None:
        now = self.console.clock.now()
        schedule = self.selected_schedule()
        self.query_one(DefinitionPanel).show(schedule, now)
        self.query_one(UpcomingTable).show(self.detail, now)
        self._show_due()
        runs = self.runs()
        self.query_one(RunTable).show(runs)
        page = len(self.cursors)
        more = "  ] older" if self.page and self.page.next_before else ""
        newer = "  [ newer" if page > 1 else ""
        self.query_one("#runs-title", Label).update(
            f"Runs, newest first — page {page} ({len(runs)} shown){newer}{more}")
        self.query_one(RunSummary).show(self.selected_run(), now)

    def _show_due(self) -> None:
        table = self.query_one(PastDueTable)
        table.show(self.due_page)
        page = len(self.due_cursors)
        older = "  > older" if self.due_page and self.due_page.next_before else ""
        newer = "  < newer" if page > 1 else ""
        table.border_subtitle = f"page {page}{newer}{older}"

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "runs":
            self.query_one(RunSummary).show(self.selected_run(), self.console.clock.now())

    # ------------------------------------------------------------------ actions

    def selected_schedule(self) -> ScheduleView | None:
        if self.detail is None:
            return None
        return merge_schedule(self.detail.schedule, self._pushed_schedule)

    def selected_run(self) -> RunView | None:
        key = self.query_one(RunTable).selected_key
        return next((r for r in self.runs() if r.run_id == key), None)

    def action_back(self) -> None:
        self.dismiss()

    def action_older(self) -> None:
        if self.page is None or not self.page.next_before:
            self.notify("No older Runs", severity="information")
            return
        self.cursors.append(self.page.next_before)
        self._load_runs(self.cursors[-1])

    def action_older_due(self) -> None:
        if self.due_page is None or self.due_page.next_before is None:
            self.notify("No older due times in the last 7 days", severity="information")
            return
        self.due_cursors.append(self.due_page.next_before)
        self._load_due(self.due_cursors[-1])

    def action_newer_due(self) -> None:
        if len(self.due_cursors) == 1:
            self.notify("These are the newest due times", severity="information")
            return
        self.due_cursors.pop()
        self._load_due(self.due_cursors[-1])

    def action_newer(self) -> None:
        if len(self.cursors) == 1:
            self.notify("This is the newest page", severity="information")
            return
        self.cursors.pop()
        self._load_runs(self.cursors[-1])

"""The operator actions (hold, release, Run now, Replay, bulk), shared by the screens.

Each action: check there is something to act on, confirm in a dialog (with a reason),
then call the backend in a worker and post :class:`ActionDone`. The screen shows the
answer at once; the live feed then confirms it in every view.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

from rich.text import Text
from textual import work

from nats_scheduler.admin.api import RunView, ScheduleView
from nats_scheduler.admin.callers import held_by
from nats_scheduler.admin.client import BULK_PAGE

from .dialogs.bulk_confirm import BulkConfirmDialog
from .dialogs.confirm import ConfirmDialog
from .dialogs.hold_confirm import HoldConfirmDialog
from .formatting import hold_end, relative, short_id
from .messages import ActionDone, ActionOutcome, BulkProgress, BulkTally
from .screens.base import ConsoleScreen


def hold_text(schedule: ScheduleView, now_text: str, now: datetime) -> str:
    hold = schedule.hold
    if hold is None:
        return ""
    return f"held by {held_by(hold)} {now_text}{hold_end(hold, now)}: {hold.reason}"


class OperatorActions(ConsoleScreen):
    """Screens that act on one Schedule (and maybe one Run) mix this in."""

    def selected_schedule(self) -> ScheduleView | None:
        """The Schedule the single-Schedule actions apply to."""
        return None

    def selected_run(self) -> RunView | None:
        """The Run that Replay applies to."""
        return None

    # ---------------------------------------------------------------- hold / release

    def action_hold(self) -> None:
        schedule = self._need_schedule()
        if schedule is None:
            return
        if schedule.state == "held":
            self.notify(f"{schedule.name} is already held", severity="warning")
            return
        body = Text.assemble(
            "No new due times fire while it is held; AstraBox's apply/reconcile do not lift "
            "the hold. Runs already started continue. With an end, it lifts itself then "
            "(by the store's clock) and the due times from then on fire.\nDeployment ",
            (schedule.deployment_id, "bold"),
        )
        dialog = HoldConfirmDialog(f"Hold {schedule.name}?", body, confirm="Hold",
                                   reason="required", danger=True, clock=self.console.clock)
        self._confirm(
            dialog,
            lambda reason: self.backend_call("Hold", "held", lambda: self.console.backend.hold(
                schedule.deployment_id, by=self.console.user, reason=reason,
                until=dialog.until)),
        )

    def action_release(self) -> None:
        schedule = self._need_schedule()
        if schedule is None:
            return
        if schedule.state != "held" or schedule.hold is None:
            self.notify(f"{schedule.name} is not held", severity="warning")
            return
        now = self.console.clock.now()
        since = relative(schedule.hold.at, now)
        body = Text.assemble(
            f"It was {hold_text(schedule, since, now)}.\nDue times fire again from the next "
            "one on; those that passed while held are not made up.",
        )
        self._confirm(
            ConfirmDialog(f"Release {schedule.name}?", body, confirm="Release",
                          reason="required"),
            lambda reason: self.backend_call(
                "Release", "released", lambda: self.console.backend.release(
                    schedule.deployment_id, by=self.console.user, reason=reason)),
        )

    # ---------------------------------------------------------------- Run now / Replay

    def action_run_now(self) -> None:
        schedule = self._need_schedule()
        if schedule is None:
            return
        body = Text.assemble(
            "A new Run with the Schedule's current payload, outside its calendar ",
            ("(the calendar does not move)", "dim"), f".\nTarget: {schedule.payload.target}",
        )
        self._confirm(
            ConfirmDialog(f"Run {schedule.name} now?", body, confirm="Run now"),
            lambda reason: self.backend_call(
                "Run now", "requested", lambda: self.console.backend.run_now(
                    schedule.deployment_id, by=self.console.user, reason=reason or None)),
        )

    def action_replay(self) -> None:
        run = self.selected_run()
        if run is None:
            self.notify("Select a Run to replay first", severity="warning")
            return
        body = Text.assemble(
            "A new Run that re-uses this Run's captured payload ",
            ("(not the Schedule's current one)", "dim"),
            f".\nRun {run.run_id} · {run.state.value} · target {run.payload.target}",
        )
        self._confirm(
            ConfirmDialog(f"Replay Run {short_id(run.run_id)}?", body, confirm="Replay"),
            lambda reason: self.backend_call(
                "Replay", "replayed", lambda: self.console.backend.replay(
                    run.run_id, by=self.console.user, reason=reason or None)),
        )

    # ---------------------------------------------------------------- bulk

    bulk_tally: BulkTally | None = None
    """The bulk action running now (None: none)."""
    last_bulk: BulkTally | None = None
    """The latest bulk action's report."""
    _bulk_stop = False

    def bulk_filter(self) -> str:
        """The filter bulk actions apply to (the Schedules screen's filter)."""
        return ""

    def bulk_matching(self, text: str) -> list[ScheduleView] | None:
        """The Schedules a bulk action on ``text`` applies to, if this screen knows them
        all (None: ask the backend)."""
        return None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "cancel_bulk":
            return self.bulk_tally is not None  # shown only while one runs
        return super().check_action(action, parameters)

    def action_hold_bulk(self) -> None:
        self._bulk(hold=True)

    def action_release_bulk(self) -> None:
        self._bulk(hold=False)

    def action_cancel_bulk(self) -> None:
        if self.bulk_tally is None:
            self.notify("No bulk action is running", severity="warning")
            return
        self._bulk_stop = True
        self.notify("Stopping after the page in progress…", title="Cancelling")

    def _bulk(self, *, hold: bool) -> None:
        text = self.bulk_filter()
        if not text:
            self.notify("Bulk actions apply to the current filter: set one with / first.",
                        severity="warning")
            return
        if self.bulk_tally is not None:
            self.notify("A bulk action is running: wait for it, or cancel it with c.",
                        severity="warning")
            return
        self._bulk_confirm(text, hold=hold)

    @work(group="action", exit_on_error=False)
    async def _bulk_confirm(self, text: str, *, hold: bool) -> None:
        # Every loaded Schedule with the service's own filter, or the backend's list: the
        # dialog counts exactly what the bulk call will go through.
        matching = self.bulk_matching(text)
        if matching is None:
            matching = await self.guarded("Listing",
                                          self.console.backend.list_schedules(text))
        if matching is None:
            return
        if not matching:
            self.notify(f"No Schedule matches {text!r}", severity="warning")
            return
        self._confirm(
            BulkConfirmDialog(text, matching, hold=hold),
            lambda reason: self._run_bulk(text, reason, hold=hold, expected=len(matching)),
        )

    @work(group="bulk", exit_on_error=False)
    async def _run_bulk(self, text: str, reason: str, *, hold: bool, expected: int) -> None:
        """The bulk action page by page: progress after each, stop between two on ``c``."""
        backend, user = self.console.backend, self.console.user
        call = backend.hold_bulk if hold else backend.release_bulk
        tally = BulkTally("held" if hold else "released", text, expected)
        self.bulk_tally, self._bulk_stop = tally, False
        self.refresh_bindings()
        self.post_message(BulkProgress(tally, finished=False))
        after: str | None = None
        try:
            while True:
                page = await self.guarded(f"Bulk {'hold' if hold else 'release'}", call(
                    text, by=user, reason=reason, after=after, limit=BULK_PAGE))
                if page is None:
                    tally.failed = "the scheduler did not complete a page (see the message)"
                    return
                tally.changed += page.changed_total
                tally.unchanged += page.unchanged_total
                tally.changed_ids.extend(page.changed)
                after = page.next_after
                if after is None:
                    return
                if self._bulk_stop:
                    tally.cancelled = True
                    return
                self.post_message(BulkProgress(tally, finished=False))
        finally:
            self.bulk_tally = None
            self.last_bulk = tally
            self.post_message(BulkProgress(tally, finished=True))

    def on_bulk_progress(self, message: BulkProgress) -> None:
        if message.finished:
            self.refresh_bindings()
            tally = message.tally
            title = "Bulk action " + ("cancelled" if tally.cancelled else
                                      "stopped" if tally.failed else "done")
            self.notify(bulk_report(tally), title=title,
                        severity="warning" if tally.cancelled or tally.failed else
                        "information", timeout=30)
        self.show_bulk(message.tally, finished=message.finished)

    def show_bulk(self, tally: BulkTally, *, finished: bool) -> None:
        """Show a bulk action's progress (the Schedules screen has a label for it)."""

    # ---------------------------------------------------------------- plumbing

    def _need_schedule(self) -> ScheduleView | None:
        schedule = self.selected_schedule()
        if schedule is None:
            self.notify("No Schedule selected", severity="warning")
        return schedule

    def _confirm(self, dialog: ConfirmDialog, then: Callable[[str], object]) -> None:
        def done(reason: str | None) -> None:
            if reason is not None:
                then(reason)

        self.app.push_screen(dialog, done)

    @work(group="action", exit_on_error=False)
    async def backend_call(
        self, what: str, verb: str, call: Callable[[], Awaitable[object]]
    ) -> None:
        result = await self.guarded(what, call())
        if result is None:
            return
        outcome = ActionOutcome(verb)
        if isinstance(result, ScheduleView):
            outcome.schedule = result
        elif isinstance(result, RunView):
            outcome.run = result
        else:
            outcome.bulk = result  # type: ignore[assignment]
        self.post_message(ActionDone(outcome))

    def on_action_done(self, message: ActionDone) -> None:
        self.notify(outcome_text(message.outcome), title="Done")
        self.show_outcome(message.outcome)

    def show_outcome(self, outcome: ActionOutcome) -> None:
        """Reflect an action's answer at once (before the live feed confirms it)."""


def outcome_text(outcome: ActionOutcome) -> str:
    if outcome.schedule is not None:
        return f"{outcome.schedule.name} {outcome.verb}"
    if outcome.run is not None:
        run = outcome.run
        origin = f" (replay of {short_id(run.replay_of)})" if run.replay_of else ""
        return f"Run {short_id(run.run_id)} {outcome.verb} for {run.deployment_id}{origin}"
    if outcome.bulk is not None:
        changed, unchanged = outcome.bulk.changed_total, outcome.bulk.unchanged_total
        return f"{changed} Schedules {outcome.verb}, {unchanged} unchanged"
    return outcome.verb


def bulk_progress(tally: BulkTally) -> str:
    verb = "Holding" if tally.verb == "held" else "Releasing"
    return f"{verb} {tally.filter!r}: {tally.done:,} of {tally.expected:,} · c to cancel"


def bulk_report(tally: BulkTally) -> str:
    """What a bulk action did, in full: the operator's record of it."""
    text = (f"{tally.changed:,} Schedules {tally.verb}, {tally.unchanged:,} unchanged "
            f"(matching {tally.filter!r})")
    if tally.cancelled:
        text += (f"; cancelled after {tally.done:,} of {tally.expected:,}: "
                 "the others were not touched")
    elif tally.failed:
        text += f"; stopped after {tally.done:,} of {tally.expected:,}: {tally.failed}"
    return text

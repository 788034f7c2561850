"""The operator actions (hold, release, Run now, Replay, bulk), shared by the screens.

Each action: check there is something to act on, confirm in a dialog (with a reason),
then call the backend in a worker and post :class:`ActionDone`. The screen shows the
answer at once; the live feed then confirms it in every view.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from rich.text import Text
from textual import work

from nats_scheduler.admin.api import RunView, ScheduleView

from .dialogs.bulk_confirm import BulkConfirmDialog
from .dialogs.confirm import ConfirmDialog
from .formatting import relative, short_id
from .messages import ActionDone, ActionOutcome
from .screens.base import ConsoleScreen


def hold_text(schedule: ScheduleView, now_text: str) -> str:
    hold = schedule.hold
    if hold is None:
        return ""
    return f"held by {hold.by} {now_text}: {hold.reason}"


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
            "the hold. Runs already started continue.\nDeployment ", (schedule.deployment_id,
                                                                       "bold"),
        )
        self._confirm(
            ConfirmDialog(f"Hold {schedule.name}?", body, confirm="Hold", reason="required",
                          danger=True),
            lambda reason: self.backend_call("Hold", "held", lambda: self.console.backend.hold(
                schedule.deployment_id, by=self.console.user, reason=reason)),
        )

    def action_release(self) -> None:
        schedule = self._need_schedule()
        if schedule is None:
            return
        if schedule.state != "held" or schedule.hold is None:
            self.notify(f"{schedule.name} is not held", severity="warning")
            return
        since = relative(schedule.hold.at, self.console.clock.now())
        body = Text.assemble(
            f"It was {hold_text(schedule, since)}.\nDue times fire again from the next one "
            "on; those that passed while held are not made up.",
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

    def bulk_filter(self) -> str:
        """The filter bulk actions apply to (the Schedules screen's filter)."""
        return ""

    def action_hold_bulk(self) -> None:
        self._bulk(hold=True)

    def action_release_bulk(self) -> None:
        self._bulk(hold=False)

    def _bulk(self, *, hold: bool) -> None:
        text = self.bulk_filter()
        if not text:
            self.notify("Bulk actions apply to the current filter: set one with / first.",
                        severity="warning")
            return
        self._bulk_confirm(text, hold=hold)

    @work(group="action", exit_on_error=False)
    async def _bulk_confirm(self, text: str, *, hold: bool) -> None:
        # The list comes from the backend with the same filter the bulk call will use, so
        # the dialog lists exactly what the service will change.
        matching = await self.guarded("Listing", self.console.backend.list_schedules(text))
        if matching is None:
            return
        if not matching:
            self.notify(f"No Schedule matches {text!r}", severity="warning")
            return
        backend, user = self.console.backend, self.console.user
        call = backend.hold_bulk if hold else backend.release_bulk
        verb = "Hold" if hold else "Release"
        self._confirm(
            BulkConfirmDialog(text, matching, hold=hold),
            lambda reason: self.backend_call(
                f"Bulk {verb.lower()}", "held" if hold else "released",
                lambda: call(text, by=user, reason=reason)),
        )

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
        changed, unchanged = len(outcome.bulk.changed), len(outcome.bulk.unchanged)
        return f"{changed} Schedules {outcome.verb}, {unchanged} unchanged"
    return outcome.verb

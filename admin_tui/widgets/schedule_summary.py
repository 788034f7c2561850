"""The panel under the Schedules table: everything about the highlighted Schedule that does
not fit a row — full IDs, the hold (who, when, why), both clocks of the next due time, and
the health problems the admin service reports for it.
"""

from __future__ import annotations

from datetime import datetime

from rich.text import Text
from textual.widgets import Static

from nats_scheduler.admin.api import ScheduleView
from nats_scheduler.admin.callers import held_by

from ..formatting import hold_end, in_zone, relative, styled, utc
from .schedule_table import HealthFlags
from .steady import update_changed


def summary_text(s: ScheduleView | None, flags: HealthFlags, now: datetime) -> Text:
    if s is None:
        return Text("No Schedule selected.", style="dim")
    text = Text.assemble(
        (s.name, "bold"), "  ", (s.deployment_id, "cyan"), "  ", styled(s.state),
        f"  v{s.version}  target {s.payload.target}  updated {relative(s.updated_at, now)}\n",
    )
    if s.hold is not None:
        text.append_text(Text.assemble(
            ("Held", "bold yellow"), f" by {held_by(s.hold)} at {utc(s.hold.at)} "
            f"({relative(s.hold.at, now)}){hold_end(s.hold, now)}: ",
            (s.hold.reason, "italic"), "\n",
        ))
    ends = s.hold is not None and s.hold.until is not None
    due = s.next_due[0] if s.next_due and (s.state == "enabled" or ends) else None
    if due is not None:
        text.append(f"Next due{' after the hold' if ends else ''} {in_zone(due, s.timezone)} · "
                    f"{utc(due)} · {relative(due, now)}\n")
    else:
        text.append(f"Next due: none ({s.state})\n", style="dim")
    last = s.last_run_state.value if s.last_run_state else "no Runs yet"
    when = f" {relative(s.last_run_at, now)}" if s.last_run_at else ""
    text.append(f"Last run {last}{when} · {s.failures_24h} failed in 24 h")
    for problem in flags.problems(s.deployment_id):
        text.append(f"\n⚠ {problem}", style="bold red")
    return text


class ScheduleSummary(Static):
    def show(self, s: ScheduleView | None, flags: HealthFlags, now: datetime) -> None:
        update_changed(self, summary_text(s, flags, now))

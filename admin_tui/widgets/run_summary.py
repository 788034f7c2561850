"""The line under the Runs table: the highlighted Run in full (IDs, who and why, error)."""

from __future__ import annotations

from datetime import datetime

from rich.text import Text
from textual.widgets import Static

from nats_scheduler.admin.api import RunView

from ..formatting import relative, styled, utc


def run_text(run: RunView | None, now: datetime) -> Text:
    if run is None:
        return Text("No Runs.", style="dim")
    text = Text.assemble(
        "Run ", (run.run_id, "bold cyan"), "  ", styled(run.state.value),
        f"  {run.trigger.value}  created {utc(run.created_at, seconds=True)} "
        f"({relative(run.created_at, now)})  updated {relative(run.updated_at, now)}\n",
    )
    text.append(f"Session {run.session_id or '—'}  turn {run.turn_id or '—'}  "
                f"attempts {run.attempts}")
    if run.holder:
        text.append(f"  held by process {run.holder}")
    if run.requested_by:
        text.append(f"\nRequested by {run.requested_by}"
                    + (f": {run.reason}" if run.reason else ""))
    if run.replay_of:
        text.append(f"  replay of {run.replay_of}", style="magenta")
    if run.error:
        text.append(f"\nError: {run.error}", style="red")
    return text


class RunSummary(Static):
    def show(self, run: RunView | None, now: datetime) -> None:
        self.update(run_text(run, now))

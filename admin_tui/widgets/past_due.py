"""A Schedule's past due times, newest first: each with its Run or why there is none."""

from __future__ import annotations

from rich.text import Text

from nats_scheduler.admin.api import DueAccount
from nats_scheduler.core.due_words import describe
from nats_scheduler.core.dueaccount import DueTime, Outcome

from ..formatting import DASH, STATE_STYLES
from .keyed_table import KeyedTable

COLUMNS = (
    ("due", "Due (UTC)", 11),
    ("outcome", "Outcome", 11),
    ("why", "Run, or why there is none", 90),
)

OUTCOME_STYLES = {
    Outcome.RUN: "green",
    Outcome.SKIPPED: "yellow",
    Outcome.PENDING: "cyan",
    Outcome.UNEXPLAINED: "bold red",
}
"""A broken promise stands out; a skip the rules make is only marked."""


def _outcome(line: DueTime) -> Text:
    if line.outcome == Outcome.RUN and line.state is not None:
        return Text(line.state.value, style=STATE_STYLES.get(line.state.value, "green"))
    return Text(line.outcome.value, style=OUTCOME_STYLES[line.outcome])


def _why(line: DueTime) -> Text:
    text = describe(line)
    if line.outcome == Outcome.RUN:
        return Text(text, style="red" if line.error else "dim", overflow="ellipsis")
    return Text(text, style=OUTCOME_STYLES[line.outcome], overflow="ellipsis")


class PastDueTable(KeyedTable):
    """Rows keyed by due time; the screen pages them like the Runs."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(COLUMNS, **kwargs)
        self.border_title = "Past due times"

    def show(self, account: DueAccount | None) -> None:
        if account is None:
            self.set_rows([])
            return
        self.set_rows([(line.due_at.isoformat(), [
            Text(line.due_at.strftime("%m-%d %H:%M")), _outcome(line), _why(line),
        ]) for line in account.due_times] or [("none", [Text(DASH, style="dim"), Text(""),
                                                         Text("no due times in the window",
                                                              style="dim")])])

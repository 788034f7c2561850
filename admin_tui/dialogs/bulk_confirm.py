"""Confirmation of a bulk hold or release: it lists every Schedule the filter matches."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from nats_scheduler.admin.api import ScheduleView

from ..formatting import styled
from .confirm import ConfirmDialog

ITEMS_SHOWN = 100
"""Matching Schedules listed by name; the count says how many more (a dialog of 50,000
lines would take seconds to open and nobody reads it)."""


def bulk_items(schedules: Sequence[ScheduleView], *, hold: bool) -> list[Text]:
    """One line per matching Schedule (the first ``ITEMS_SHOWN`` in the order the action
    goes through them, by deployment ID), saying whether the action changes it."""
    items = []
    ordered = sorted(schedules, key=lambda s: s.deployment_id)
    for s in ordered[:ITEMS_SHOWN]:
        unchanged = (s.state == "held") if hold else (s.state != "held")
        line = Text.assemble(
            ("• ", "dim"), (s.name, "bold"), f"  {s.deployment_id}  ", styled(s.state),
        )
        if unchanged:
            line.append("  (unchanged)", style="dim")
        items.append(line)
    if len(ordered) > ITEMS_SHOWN:
        items.append(Text(f"… and {len(ordered) - ITEMS_SHOWN:,} more", style="dim"))
    return items


class BulkConfirmDialog(ConfirmDialog):
    """Hold or release every Schedule matching ``filter``; the reason is required."""

    def __init__(self, filter_text: str, schedules: Sequence[ScheduleView], *, hold: bool) -> None:
        verb = "Hold" if hold else "Release"
        changing = sum(
            1 for s in schedules if (s.state != "held" if hold else s.state == "held")
        )
        body = Text.assemble(
            f"{verb} every Schedule matching the filter ", (repr(filter_text), "bold"), ": ",
            (f"{len(schedules):,} match", "bold"), f", {changing:,} will change. It goes "
            "page by page, with its progress shown; c stops it between two pages.",
        )
        super().__init__(
            f"{verb} {len(schedules):,} Schedules?", body,
            confirm=f"{verb} {changing:,}", reason="required",
            items=bulk_items(schedules, hold=hold), danger=hold,
        )
        self.filter_text = filter_text

"""The hold confirmation: a reason, and when the hold ends by itself (optional).

The end is typed as ``nats-scheduler hold --until`` takes it: an instant with its time zone
(``2026-03-28T18:00Z``) or a time from now (``+2h``, ``+90m``, ``+1d``), read against the
console's clock; the scheduler checks it is still to come on the store's clock. Left empty,
the hold lasts until someone releases it.
"""

from __future__ import annotations

from datetime import datetime

from textual.app import ComposeResult
from textual.widgets import Input

from nats_scheduler.clock import Clock
from nats_scheduler.core.validation import check_hold_end, parse_hold_end

from .confirm import ConfirmDialog

UNTIL_HINT = "until (optional): 2026-03-28T18:00Z, +2h, +90m, +1d — empty: until released"


class HoldConfirmDialog(ConfirmDialog):
    """:class:`ConfirmDialog` with an end; :attr:`until` is the end read when confirmed."""

    def __init__(self, *args: object, clock: Clock, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.clock = clock
        self.until: datetime | None = None

    def fields(self) -> ComposeResult:
        yield Input(placeholder=UNTIL_HINT, id="until")

    def accept(self, reason: str) -> bool:
        text = self.query_one("#until", Input).value.strip()
        if not text:
            self.until = None
            return True
        now = self.clock.now()
        try:
            self.until = parse_hold_end(text, now)
            check_hold_end(self.until, now)
        except ValueError as exc:
            self.notify(str(exc), title="When the hold ends", severity="warning")
            return False
        return True

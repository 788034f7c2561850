"""One event of the live tail, expanded to its JSON (what the audit trail stores)."""

from __future__ import annotations

import json
from typing import ClassVar

from rich.json import JSON
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from nats_scheduler.core.events import to_builtins

from ..formatting import event_tag


class EventJsonDialog(ModalScreen[None]):
    """Escape, Enter or q closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,enter,q", "close", "Close"),
    ]

    def __init__(self, event: object) -> None:
        super().__init__(classes="dialog-screen")
        self.event = event

    def compose(self) -> ComposeResult:
        data = to_builtins(self.event)  # type: ignore[arg-type]
        with Vertical(id="dialog", classes="-wide"):
            yield Label(f"Event {event_tag(self.event)}", id="dialog-title")
            with VerticalScroll(id="json-scroll"):
                yield Static(JSON(json.dumps(data, default=str), indent=2), id="event-json")

    def action_close(self) -> None:
        self.dismiss(None)

"""The confirmation every operator action goes through, with a reason field.

It returns the reason (``""`` when optional and left empty) or None when cancelled. A
required reason keeps the confirm button disabled until something is typed: the audit
trail always says why (docs/design.md, "Operator hold").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

ReasonMode = Literal["required", "optional"]


class ConfirmDialog(ModalScreen[str | None]):
    """Confirm an action; Enter in the reason field confirms, Escape cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(
        self,
        title: str,
        body: str | Text,
        *,
        confirm: str,
        reason: ReasonMode = "optional",
        items: Sequence[Text] = (),
        danger: bool = False,
    ) -> None:
        super().__init__(classes="dialog-screen")
        self.title_text = title
        self.body = body
        self.confirm_label = confirm
        self.reason_mode = reason
        self.items = list(items)
        self.danger = danger

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="-danger" if self.danger else ""):
            yield Label(self.title_text, id="dialog-title")
            yield Static(self.body, id="dialog-body")
            if self.items:
                with VerticalScroll(id="dialog-items"):
                    for item in self.items:
                        yield Static(item, classes="dialog-item")
            hint = "reason (required)" if self.reason_mode == "required" else "reason (optional)"
            yield Input(placeholder=hint, id="reason")
            yield from self.fields()
            with Horizontal(id="dialog-buttons"):
                yield Button(
                    self.confirm_label, id="confirm",
                    variant="error" if self.danger else "primary",
                    disabled=self.reason_mode == "required",
                )
                yield Button("Cancel", id="cancel")

    def fields(self) -> ComposeResult:
        """More fields under the reason (none here; :meth:`accept` checks them)."""
        return iter(())

    def on_mount(self) -> None:
        self.query_one("#reason", Input).focus()

    def _reason(self) -> str | None:
        text = self.query_one("#reason", Input).value.strip()
        if self.reason_mode == "required" and not text:
            return None
        return text

    def on_input_changed(self, event: Input.Changed) -> None:
        self.query_one("#confirm", Button).disabled = self._reason() is None

    def accept(self, reason: str) -> bool:
        """Whether the dialog may close with ``reason`` (a dialog with more fields checks
        them here, says what is wrong and returns False to stay open)."""
        return True

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        reason = self._reason()
        if reason is None:
            self.notify("A reason is required: it goes into the audit trail.",
                        severity="warning")
            return
        if self.accept(reason):
            self.dismiss(reason)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "confirm":
            reason = self._reason()
            if reason is not None and self.accept(reason):
                self.dismiss(reason)
        else:
            self.dismiss(None)

    def action_cancel(self) -> None:
        self.dismiss(None)

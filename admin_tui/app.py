"""Placeholder of the scheduler console: one screen, ``q`` quits."""

from __future__ import annotations

from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Footer, Header, Static

PLACEHOLDER_TEXT = "AstraBox scheduler console — coming soon"


class SchedulerConsole(App[None]):
    """The console; for now a placeholder screen."""

    TITLE = "AstraBox scheduler"
    CSS = "#placeholder { width: 100%; height: 1fr; content-align: center middle; }"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("q", "quit", "Quit")]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(PLACEHOLDER_TEXT, id="placeholder")
        yield Footer()


def main() -> None:
    """Entry point of ``astrabox-sched-tui``."""
    SchedulerConsole().run()


if __name__ == "__main__":
    main()

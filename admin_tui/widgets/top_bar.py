"""The two lines on top of every screen.

Line 1: the app, the four views with their keys (the current one highlighted), the live
link, who you are. Line 2: where you are, and the admin service's health signals counted.
Re-renders when the app's link, health or permission change (watched, not polled).
"""

from __future__ import annotations

from typing import cast

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from nats_scheduler.admin.api import Health

from ..context import ConsoleContext

LINK_TEXT = {
    "live": ("● live", "bold green"),
    "connecting": ("◌ connecting…", "bold yellow"),
    "lost": ("✖ connection lost, reconnecting…", "bold red"),
}
TABS = (("1", "Schedules", "schedules"), ("2", "Events", "events"), ("3", "Cluster", "cluster"),
        ("4", "Load", "load"))


def health_text(health: Health | None) -> Text:
    """The admin service's health signals, counted; red when any is non-zero."""
    if health is None:
        return Text("health: …", style="dim")
    counts = [
        (health.silent_stop_count, "silent stop"),
        (health.stuck_run_count, "stuck"),
        (health.failed_run_count, "failed/24h"),
    ]
    if health.skipped_events:  # poison events: shown only when there are any
        counts.append((len(health.skipped_events), "skipping events"))
    if not any(n for n, _ in counts):
        return Text("✓ healthy", style="bold green")
    text = Text("⚠ ", style="bold red")
    for i, (n, label) in enumerate(counts):
        if i:
            text.append(" · ", style="dim")
        text.append(f"{n} {label}", style="bold red" if n else "dim")
    return text


def tabs_text(current: str) -> Text:
    text = Text.assemble(("AstraBox scheduler", "bold"), "  ")
    for key, label, mode in TABS:
        style = "reverse bold" if mode == current else ""
        text.append_text(Text.assemble((f" {key} ", "bold cyan"), (f"{label} ", style)))
        text.append(" ")
    return text


class TopBar(Static):
    DEFAULT_CLASSES = "top-bar"

    def __init__(self, where: str, *, tab: str) -> None:
        super().__init__()
        self.where = where
        self.tab = tab

    @property
    def console(self) -> ConsoleContext:
        return cast(ConsoleContext, self.app)

    def on_mount(self) -> None:
        for attribute in ("link", "health", "can_act"):
            self.watch(self.app, attribute, self._changed, init=False)
        self._changed()

    def _changed(self, _value: object = None) -> None:
        self.set_class(self.console.link == "lost", "-lost")
        self.update(self._render_bar())

    def _render_bar(self) -> Table:
        ctx = self.console
        grid = Table.grid(expand=True, padding=(0, 1))
        grid.add_column(justify="left", no_wrap=True, overflow="ellipsis")
        grid.add_column(justify="right", no_wrap=True)
        link, style = LINK_TEXT.get(ctx.link, (ctx.link, ""))
        who = Text.assemble((link, style), "   ", (ctx.user, "bold"))
        if not ctx.can_act:
            who.append(" (read-only)", style="yellow")
        grid.add_row(tabs_text(self.tab), who)
        grid.add_row(Text(self.where, style="bold"), health_text(ctx.health))
        return grid

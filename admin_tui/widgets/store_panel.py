"""The store's health as the admin service sees it, and the history retention in force."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from nats_scheduler.admin.api import ClusterStatus, StoreHealth

from ..formatting import DASH


def retention_text(store: StoreHealth) -> Text:
    """``90 d · 10000 Runs``: the index stream's age limit and Runs kept per deployment."""
    if store.retention_days is None and store.retention_runs is None:
        return Text(DASH, style="dim")
    age = "no age limit" if store.retention_days is None else f"{store.retention_days:g} d"
    runs = "no count limit" if store.retention_runs is None else f"{store.retention_runs} Runs"
    return Text(f"{age} · {runs}")


def processes_text(status: ClusterStatus) -> Text:
    """``2``: every live process; ``2 · 1 acts`` when only one of them serves actions."""
    alive = len(status.replicas)
    serving = sum(1 for r in status.replicas if r.answered)
    if serving == alive:
        return Text(str(alive))
    return Text.assemble(str(alive), " · ", (f"{serving} acts", "bold red"))


def store_table(status: ClusterStatus) -> Table:
    store = status.store
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="dim", justify="right")
    grid.add_column()
    grid.add_row("Store", Text("✓ reachable", "bold green") if store.reachable
                 else Text("✖ unreachable", "bold red"))
    grid.add_row("Server", store.server_version or "—")
    grid.add_row("Replicas", "—" if store.replicas is None else str(store.replicas))
    grid.add_row("Leader", store.leader or "—")
    if store.detail:
        grid.add_row("Detail", Text(store.detail, style="yellow"))
    grid.add_row("Retention", retention_text(store))
    grid.add_row("Processes", processes_text(status))
    grid.add_row("In flight", str(status.in_flight_count))
    grid.add_row("Leases", str(status.lease_count))
    return grid


class StorePanel(Static):
    def show(self, status: ClusterStatus | None) -> None:
        self.update(store_table(status) if status else Text("loading…", style="dim"))

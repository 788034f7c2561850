"""The cluster: provider processes, Run leases, in-flight Runs, the store's health."""

from __future__ import annotations

from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Label

from nats_scheduler.admin.api import ClusterStatus
from nats_scheduler.core import events as ev

from ..messages import ClusterLoaded
from ..widgets.lease_table import LeaseTable
from ..widgets.replica_table import ReplicaTable
from ..widgets.store_panel import StorePanel
from ..widgets.top_bar import TopBar
from .base import ConsoleScreen


class ClusterScreen(ConsoleScreen):
    """Reloaded when Runs are claimed, dispatched or failed (they move leases), and on g."""

    AUTO_FOCUS = "#replicas"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("g", "refresh", "Refresh")]

    def __init__(self) -> None:
        super().__init__(id="cluster-screen")
        self.status: ClusterStatus | None = None

    def compose(self) -> ComposeResult:
        yield TopBar("Cluster: processes, leases, store", tab="cluster")
        with Horizontal(id="cluster-top"):
            yield StorePanel(id="store")
            with Vertical(id="replicas-box"):
                yield Label("Provider processes", classes="section-title")
                yield ReplicaTable(id="replicas")
        yield Label("Run leases", classes="section-title")
        yield LeaseTable(id="leases")
        yield Label("", id="in-flight")
        yield Footer()

    def absorb(self, event: object) -> set[str | None]:
        return {None} if isinstance(event, ev.RunEvent) else set()

    def reload(self, dirty: set[str | None] | None) -> None:
        self._load()

    @work(group="load", exclusive=True, exit_on_error=False)
    async def _load(self) -> None:
        status = await self.guarded("Loading the cluster", self.console.backend.cluster_status())
        if status is not None:
            self.post_message(ClusterLoaded(status))

    def on_cluster_loaded(self, message: ClusterLoaded) -> None:
        self.status = message.status
        self.repaint()

    def repaint(self) -> None:
        now = self.console.clock.now()
        self.query_one(StorePanel).show(self.status)
        if self.status is None:
            return
        self.query_one(ReplicaTable).show(self.status.replicas, now)
        self.query_one(LeaseTable).show(self.status.leases, now)
        flight = ", ".join(self.status.in_flight) or "none"
        self.query_one("#in-flight", Label).update(f"In-flight Runs: {flight}")

    def action_refresh(self) -> None:
        self._load()

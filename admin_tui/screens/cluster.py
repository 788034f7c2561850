"""The cluster: provider processes and their figures, Run leases, in-flight Runs, the
store's health and the history retention."""

from __future__ import annotations

from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Footer, Label

from nats_scheduler.admin.api import ClusterStatus, ReplicaView
from nats_scheduler.core import events as ev

from ..messages import ClusterLoaded
from ..widgets.lease_table import LeaseTable
from ..widgets.replica_summary import ReplicaSummary
from ..widgets.replica_table import ReplicaTable
from ..widgets.steady import update_changed
from ..widgets.store_panel import StorePanel
from ..widgets.top_bar import TopBar
from .base import ConsoleScreen


class ClusterScreen(ConsoleScreen):
    """Reloaded when Runs are claimed, dispatched or failed (they move leases), and on g.

    At most once a second from the live feed (a herd moves Runs all the time, and each
    reload is a round trip to every provider process), never while hidden, and never over a
    reload still waiting for its answer: under load the answer can take longer than the
    interval, and a reload cancelling the one before would never show anything.
    """

    AUTO_FOCUS = "#replicas"
    min_reload_interval = 1.0
    BINDINGS: ClassVar[list[BindingType]] = [Binding("g", "refresh", "Refresh")]

    def __init__(self) -> None:
        super().__init__(id="cluster-screen")
        self.status: ClusterStatus | None = None
        self._loading = False
        self._again = False

    def compose(self) -> ComposeResult:
        yield TopBar("Cluster: processes, leases, store", tab="cluster")
        with Horizontal(id="cluster-top"):
            yield StorePanel(id="store")
            with Vertical(id="replicas-box"):
                yield Label("Provider processes", classes="section-title")
                yield ReplicaTable(id="replicas")
        yield ReplicaSummary(id="replica-summary")
        yield Label("Run leases", classes="section-title")
        yield LeaseTable(id="leases")
        yield Label("", id="in-flight")
        yield Footer()

    def absorb(self, event: object) -> set[str | None]:
        return {None} if isinstance(event, ev.RunEvent) else set()

    def reload(self, dirty: set[str | None] | None) -> None:
        if self._loading:
            self._again = True  # once more when the answer is in
            return
        self._loading = True
        self._load()

    @work(group="load", exit_on_error=False)
    async def _load(self) -> None:
        try:
            status = await self.guarded("Loading the cluster",
                                        self.console.backend.cluster_status())
            if status is not None:
                self.post_message(ClusterLoaded(status))
        finally:
            self.call_later(self._loaded)

    def _loaded(self) -> None:
        self._loading = False
        if self._again:
            self._again = False
            self.request_reload({None})

    def on_cluster_loaded(self, message: ClusterLoaded) -> None:
        self.status = message.status
        self.repaint()

    def repaint(self) -> None:
        now = self.console.clock.now()
        self.query_one(StorePanel).show(self.status)
        if self.status is None:
            return
        self.query_one(ReplicaTable).show(self.status.replicas, now)
        self.query_one(ReplicaSummary).show(self.selected_replica())
        self.query_one(LeaseTable).show(self.status.leases, now)
        flight = ", ".join(self.status.in_flight) or "none"
        update_changed(self.query_one("#in-flight", Label), f"In-flight Runs: {flight}")

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "replicas":
            self.query_one(ReplicaSummary).show(self.selected_replica())

    def selected_replica(self) -> ReplicaView | None:
        """The replica under the cursor (the first one before the table has a cursor)."""
        if self.status is None or not self.status.replicas:
            return None
        key = self.query_one(ReplicaTable).selected_key
        by_identity = {r.identity: r for r in self.status.replicas}
        return by_identity.get(key or "", self.status.replicas[0])

    def action_refresh(self) -> None:
        self.reload(None)

"""The cluster: provider processes and their figures (the highlighted one's latest firings'
lateness drawn), Run leases, in-flight Runs, the store's health and the history retention."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Footer, Label

from nats_scheduler.admin.api import ClusterStatus, ReplicaView
from nats_scheduler.core import events as ev

from ..widgets.lateness_chart import LatenessChart
from ..widgets.lease_table import LeaseTable
from ..widgets.replica_summary import ReplicaSummary
from ..widgets.replica_table import ReplicaTable
from ..widgets.steady import update_changed
from ..widgets.store_panel import StorePanel
from ..widgets.top_bar import TopBar
from .one_answer import OneAnswerScreen


class ClusterScreen(OneAnswerScreen):
    """Reloaded when Runs are claimed, dispatched or failed (they move leases), and on g.

    At most once a second from the live feed (a herd moves Runs all the time, and each
    reload is a round trip to every provider process), never while hidden, and never over a
    reload still waiting for its answer: under load the answer can take longer than the
    interval, and a reload cancelling the one before would never show anything.
    """

    AUTO_FOCUS = "#replicas"
    min_reload_interval = 1.0
    BINDINGS: ClassVar[list[BindingType]] = [Binding("g", "refresh", "Refresh")]

    asking = "Loading the cluster"

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
        yield ReplicaSummary(id="replica-summary")
        yield LatenessChart(id="replica-lateness")
        yield Label("Run leases", classes="section-title")
        yield LeaseTable(id="leases")
        yield Label("", id="in-flight")
        yield Footer()

    def absorb(self, event: object) -> set[str | None]:
        return {None} if isinstance(event, ev.RunEvent) else set()

    def ask(self) -> Awaitable[object]:
        return self.console.backend.cluster_status()

    def answered(self, answer: object) -> None:
        assert isinstance(answer, ClusterStatus)
        self.status = answer
        self.repaint()

    def repaint(self) -> None:
        now = self.console.clock.now()
        self.query_one(StorePanel).show(self.status)
        if self.status is None:
            return
        self.query_one(ReplicaTable).show(self.status.replicas, now)
        self._show_replica()
        self.query_one(LeaseTable).show(self.status.leases, now)
        flight = ", ".join(self.status.in_flight) or "none"
        update_changed(self.query_one("#in-flight", Label), f"In-flight Runs: {flight}")

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "replicas":
            self._show_replica()

    def _show_replica(self) -> None:
        """The highlighted replica's figures, and its latest firings' lateness drawn."""
        replica = self.selected_replica()
        self.query_one(ReplicaSummary).show(replica)
        metrics = replica.metrics if replica is not None else None
        self.query_one(LatenessChart).show(metrics.recent_lateness if metrics else {},
                                           "firings of this process")

    def selected_replica(self) -> ReplicaView | None:
        """The replica under the cursor (the first one before the table has a cursor)."""
        if self.status is None or not self.status.replicas:
            return None
        key = self.query_one(ReplicaTable).selected_key
        by_identity = {r.identity: r for r in self.status.replicas}
        return by_identity.get(key or "", self.status.replicas[0])

    def action_refresh(self) -> None:
        self.reload(None)

"""The provider processes (replicas) that answered the admin service."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rich.text import Text

from nats_scheduler.admin.api import ReplicaView

from ..formatting import DASH, relative
from .keyed_table import KeyedTable

COLUMNS = (
    ("identity", "Process", 30),
    ("started", "Up", 12),
    ("skew", "Clock skew", 10),
    ("in_flight", "In flight", 9),
    ("planned", "Schedules", 9),
)


def skew_text(replica: ReplicaView, now: datetime) -> Text:
    """The replica's clock against ours: due times are computed on each replica's clock."""
    if replica.now is None:
        return Text(DASH, style="dim")
    seconds = (replica.now - now).total_seconds()
    style = "bold red" if abs(seconds) >= 2 else "dim"
    return Text(f"{seconds:+.1f} s", style=style)


class ReplicaTable(KeyedTable):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(COLUMNS, **kwargs)

    def show(self, replicas: Sequence[ReplicaView], now: datetime, observed: datetime) -> None:
        self.set_rows([(r.identity, [
            Text(r.identity, style="bold"),
            Text(relative(r.started_at, now).replace(" ago", "")) if r.started_at
            else Text(DASH, style="dim"),
            skew_text(r, observed),
            Text(str(len(r.in_flight))),
            Text(str(r.schedules_planned)),
        ]) for r in replicas])

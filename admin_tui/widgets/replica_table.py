"""The provider processes (replicas) that answered the admin service."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rich.text import Text

from nats_scheduler.admin.api import ReplicaView
from nats_scheduler.admin.skew import clock_skews

from ..formatting import DASH, relative
from .keyed_table import KeyedTable

COLUMNS = (
    ("identity", "Process", 30),
    ("started", "Up", 12),
    ("skew", "Clock skew", 10),
    ("in_flight", "In flight", 9),
    ("planned", "Schedules", 9),
)


def skew_text(seconds: float | None) -> Text:
    """A replica's clock against the replicas' median (``nats_scheduler.admin.skew``).

    Leases compare one replica's clock with another's, so that is the difference that
    matters; the console's own clock would add the request's round trip to every replica.
    """
    if seconds is None:
        return Text(DASH, style="dim")
    style = "bold red" if abs(seconds) >= 2 else "dim"
    # round first, and + 0.0 turns a rounded -0.0 into 0.0 ("+0.0 s", not "-0.0 s")
    return Text(f"{round(seconds, 1) + 0.0:+.1f} s", style=style)


class ReplicaTable(KeyedTable):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(COLUMNS, **kwargs)

    def show(self, replicas: Sequence[ReplicaView], now: datetime) -> None:
        skews = clock_skews(replicas)
        self.set_rows([(r.identity, [
            Text(r.identity, style="bold"),
            Text(relative(r.started_at, now).replace(" ago", "")) if r.started_at
            else Text(DASH, style="dim"),
            skew_text(skews.get(r.identity)),
            Text(str(len(r.in_flight))),
            Text(str(r.schedules_planned)),
        ]) for r in replicas])

"""The provider processes (replicas): every live one the replicas bucket lists, and a few of
the figures of those that answer the admin service (the line under the table,
``replica_summary``, shows them all). A process that serves no actions is marked in front of
its name (``✗``: its key says why, shown under the table; ``?``: its key says it serves, but
it did not answer), so the table of a healthy cluster is unchanged."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from rich.text import Text

from nats_scheduler.admin.api import ReplicaMetrics, ReplicaView
from nats_scheduler.admin.serving import serving_cell
from nats_scheduler.admin.skew import offset_level, store_offsets

from ..formatting import DASH, lateness, relative
from .keyed_table import KeyedTable

COLUMNS = (
    ("identity", "Process", 19),
    ("started", "Up", 9),
    ("skew", "Clock", 7),
    ("in_flight", "In flight", 9),
    ("planned", "Planned", 7),
    ("runs", "Runs", 5),
    ("failed", "Failed", 6),
    ("late", "Late p99", 8),
)

LATE_SECONDS = 5.0
"""A p99 lateness past this is red: the alert docs/operations.md ("Metrics") suggests."""


_OFFSET_STYLES = {"ok": "dim", "warn": "yellow", "fail": "bold red"}


def skew_text(seconds: float | None) -> Text:
    """A replica's host clock against the store's, as it measured it
    (``nats_scheduler.admin.skew``: the bounds ``status`` and ``doctor`` use).

    The console's own clock would add the request's round trip to every replica, and the
    replicas fire by the store's clock, so that is the one to compare with.
    """
    if seconds is None:
        return Text(DASH, style="dim")
    style = _OFFSET_STYLES[offset_level(seconds)]
    # round first, and + 0.0 turns a rounded -0.0 into 0.0 ("+0.0 s", not "-0.0 s")
    return Text(f"{round(seconds, 1) + 0.0:+.1f} s", style=style)


def figure_cells(metrics: ReplicaMetrics | None) -> list[Text]:
    """Runs created, Runs failed, p99 lateness to ``start_session`` (dashes: no figures,
    a replica of a version from before they were reported)."""
    if metrics is None:
        return [Text(DASH, style="dim")] * 3
    failed = sum(metrics.runs_failed.values())
    started = metrics.lateness.get("started")
    p99 = started.p99 if started is not None else None
    return [
        Text(str(sum(metrics.runs_created.values()))),
        Text(str(failed), style="bold red" if failed else ""),
        Text(lateness(p99), style="bold red" if p99 is not None and p99 >= LATE_SECONDS
             else "" if p99 is not None else "dim"),
    ]


_MARKS = {"no": ("✗ ", "bold red"), "silent": ("? ", "yellow")}
"""The mark in front of a process that serves no actions (``serving_cell``'s words)."""


def process_cell(replica: ReplicaView) -> Text:
    """Its name, marked in front when it serves no actions (an older version that does not
    say and did not answer is marked as silent)."""
    shown = serving_cell(replica.admin_service, answered=replica.answered)
    mark = _MARKS.get("silent" if shown == "-" else shown)
    if mark is None:
        return Text(replica.identity, style="bold")
    return Text.assemble(mark, (replica.identity, "bold"))


def _count(replica: ReplicaView, value: int) -> Text:
    """A count it answered, a dash when it did not answer."""
    return Text(str(value)) if replica.answered else Text(DASH, style="dim")


class ReplicaTable(KeyedTable):
    def __init__(self, **kwargs: object) -> None:
        super().__init__(COLUMNS, **kwargs)

    def show(self, replicas: Sequence[ReplicaView], now: datetime) -> None:
        skews = store_offsets(replicas)
        self.set_rows([(r.identity, [
            process_cell(r),
            Text(relative(r.started_at, now).replace(" ago", "")) if r.started_at
            else Text(DASH, style="dim"),
            skew_text(skews.get(r.identity)),
            _count(r, r.in_flight_count),
            _count(r, r.schedules_planned),
            *figure_cells(r.metrics),
        ]) for r in replicas])

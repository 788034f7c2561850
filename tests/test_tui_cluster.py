"""The cluster view shows each replica's figures and the history retention (Pilot, fixed data).

The figures are what every replica publishes (docs/operations.md, "Metrics"): a few as
columns of the processes table, all of them on the line under it for the highlighted
process. The retention is the index stream's limits as the store health reports them.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest
from textual.pilot import Pilot

from admin_tui.app import AstraboxConsole
from admin_tui.screens.cluster import ClusterScreen
from admin_tui.widgets.keyed_table import KeyedTable
from admin_tui.widgets.replica_summary import replica_text
from admin_tui.widgets.replica_table import ReplicaTable
from nats_scheduler.admin.api import ClusterStatus, ReplicaMetrics, ReplicaView
from nats_scheduler.core.refusals import Refusal
from tests.tui_fakes import REPLICA_A, REPLICA_B, FakeBackend, frozen_clock, screen_text

pytestmark = pytest.mark.anyio

SIZE = (120, 36)


class OlderReplicaBackend(FakeBackend):
    """A process of a version from before the figures, and a store without the index."""

    async def cluster_status(self) -> ClusterStatus:
        status = await super().cluster_status()
        older = msgspec.structs.replace(status.replicas[1], metrics=None)
        store = msgspec.structs.replace(status.store, retention_days=None, retention_runs=None)
        return msgspec.structs.replace(status, replicas=[status.replicas[0], older],
                                       store=store)


async def until(pilot: Pilot[None], check: Callable[[], object], timeout: float = 5.0) -> None:
    """Let the console run until ``check()`` holds; fail after ``timeout`` seconds."""
    for _ in range(int(timeout / 0.05)):
        if check():
            return
        await pilot.pause(0.05)
    assert check(), f"condition not met within {timeout} s"


def cell(table: KeyedTable, key: str, column: str) -> str:
    index = [c.key.value for c in table.ordered_columns].index(column)
    return str(table.get_row(key)[index])


def loaded(app: AstraboxConsole) -> bool:
    return isinstance(app.screen, ClusterScreen) and app.screen.status is not None \
        and app.screen.query_one(ReplicaTable).row_count == 2


def summary_line(app: AstraboxConsole) -> str:
    """The text between the processes box and "Run leases" (the highlighted replica)."""
    lines = screen_text(app).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("─"))
    end = next(i for i, line in enumerate(lines) if line.strip() == "Run leases")
    return " ".join(line.strip() for line in lines[start + 1:end])


async def test_the_processes_table_and_the_line_under_it_show_the_figures() -> None:
    app = AstraboxConsole(backend=FakeBackend(frozen_clock()), user="alice",
                          clock=frozen_clock(), debounce=0.01, health_debounce=0.01)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        await until(pilot, lambda: loaded(app))
        table = app.screen.query_one(ReplicaTable)
        assert [cell(table, REPLICA_A, c) for c in ("runs", "failed", "late")] == \
            ["121", "0", "41 ms"]
        assert [cell(table, REPLICA_B, c) for c in ("runs", "failed", "late")] == \
            ["513", "2", "240 ms"]
        first = summary_line(app)
        assert first.startswith(f"{REPLICA_A} since it started")
        assert "stored 4 ms / 12 ms, started 11 ms / 41 ms" in first
        assert "Runs created 121 (run_now 3, schedule 118)" in first
        table.focus()
        await pilot.press("down")
        await until(pilot, lambda: summary_line(app).startswith(REPLICA_B))
        second = summary_line(app)
        assert "failed 2 (schedule 2)" in second and "takeovers 1" in second
        assert "stale firing reads 1" in second and "store errors transient 3" in second
        assert "Schedules active 4, held 1, disabled 1 · Runs in flight 1" in second
        assert "Retention 90 d · 10000 Runs" in screen_text(app)


async def test_a_process_without_figures_and_a_store_without_retention_show_dashes() -> None:
    app = AstraboxConsole(backend=OlderReplicaBackend(frozen_clock()), user="alice",
                          clock=frozen_clock(), debounce=0.01, health_debounce=0.01)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        await until(pilot, lambda: loaded(app))
        table = app.screen.query_one(ReplicaTable)
        assert [cell(table, REPLICA_B, c) for c in ("runs", "failed", "late")] == ["—"] * 3
        assert cell(table, REPLICA_A, "runs") == "121"
        table.focus()
        await pilot.press("down")
        await until(pilot, lambda: summary_line(app).startswith(REPLICA_B))
        assert "no figures" in summary_line(app)
        text = screen_text(app)
        assert "Retention —" in text and "Runs" not in text.split("Retention")[1][:20]


def test_replica_text_without_firings_or_processes() -> None:
    assert str(replica_text(None)) == "No provider process answered."
    quiet = ReplicaView(identity="p", metrics=ReplicaMetrics())
    text = str(replica_text(quiet))
    assert "Fire lateness p50 / p99: no firings yet" in text
    assert "Runs created 0 · dispatched 0 · failed 0" in text
    assert "store errors none" in text and "Schedules none" in text



def test_replica_text_names_the_schedules_its_reconcile_refused() -> None:
    """The count in red, the first five with their kind and why, and how many more."""
    refused = [Refusal(deployment_id=f"dep-{i}", kind="invalid",
                       reason=f"schedule of deployment 'dep-{i}' is invalid: bad cron")
               for i in range(7)]
    replica = ReplicaView(identity="p", metrics=ReplicaMetrics(), refused=refused,
                          refused_total=12)
    text = replica_text(replica)
    plain = str(text)
    assert "Refused Schedules 12 (each keeps its stored schedule, or has none)" in plain
    assert "dep-4 invalid: schedule of deployment 'dep-4' is invalid: bad cron" in plain
    assert "dep-5" not in plain and "and 7 more (nats-scheduler status lists them)" in plain
    assert any(span.style == "bold red" and plain[span.start:span.end] == "12"
               for span in text.spans)
    assert "Refused" not in str(replica_text(ReplicaView(identity="q",
                                                         metrics=ReplicaMetrics())))

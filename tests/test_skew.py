"""Clock skew of replicas: against their median, the same for ``status`` and the console."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from admin_tui.formatting import DASH
from admin_tui.widgets.replica_table import skew_text
from nats_scheduler.admin.api import ReplicaView
from nats_scheduler.admin.skew import clock_skews
from nats_scheduler.cli.status import clock_skews as status_skews

T = datetime(2026, 1, 1, tzinfo=UTC)


def replicas(*offsets: float | None) -> list[ReplicaView]:
    return [ReplicaView(identity=f"r{i}", now=None if o is None else T + timedelta(seconds=o))
            for i, o in enumerate(offsets)]


def test_replicas_on_one_machine_show_no_skew_whatever_the_round_trip() -> None:
    """Answers read within a millisecond of each other, however late they reach us."""
    same = replicas(0.0, 0.0005, 0.001)
    assert all(abs(s) < 0.01 for s in clock_skews(same).values())


def test_skew_is_against_the_median() -> None:
    assert clock_skews(replicas(0.0, 0.5, 3.0)) == {"r0": -0.5, "r1": 0.0, "r2": 2.5}
    assert clock_skews(replicas(0.2, -2.5)) == {"r0": 0.0, "r1": -2.7}  # upper middle
    assert clock_skews(replicas(1.0, None)) == {"r0": 0.0}
    assert clock_skews(replicas(None)) == {}


def test_status_and_console_share_the_measure() -> None:
    assert status_skews is clock_skews
    assert str(skew_text(-0.04)) == "+0.0 s"
    assert str(skew_text(-2.7)) == "-2.7 s" and skew_text(-2.7).style == "bold red"
    assert str(skew_text(None)) == DASH

"""Hosts' clocks against the store's: one measure and one set of bounds for ``status``,
``doctor`` and the console."""

from __future__ import annotations

from admin_tui.formatting import DASH
from admin_tui.widgets.replica_table import skew_text
from nats_scheduler.admin.api import ReplicaView
from nats_scheduler.admin.skew import (
    OFFSET_FAIL_SECONDS,
    OFFSET_WARN_SECONDS,
    offset_level,
    store_offsets,
)


def test_each_replica_is_shown_with_its_own_measure_and_unmeasured_ones_are_left_out() -> None:
    replicas = [ReplicaView(identity="a", server_offset=0.002),
                ReplicaView(identity="b", server_offset=-20.0),
                ReplicaView(identity="older")]
    assert store_offsets(replicas) == {"a": 0.002, "b": -20.0}
    assert store_offsets([]) == {}


def test_the_bounds_are_symmetric() -> None:
    assert OFFSET_WARN_SECONDS < OFFSET_FAIL_SECONDS
    for sign in (1, -1):
        assert offset_level(sign * 0.01) == "ok"
        assert offset_level(sign * OFFSET_WARN_SECONDS) == "warn"
        assert offset_level(sign * OFFSET_FAIL_SECONDS) == "fail"


def test_the_console_colours_by_the_same_bounds() -> None:
    assert str(skew_text(-0.04)) == "+0.0 s" and skew_text(-0.04).style == "dim"
    assert skew_text(OFFSET_WARN_SECONDS).style == "yellow"
    assert str(skew_text(-2.7)) == "-2.7 s" and skew_text(-2.7).style == "bold red"
    assert str(skew_text(None)) == DASH

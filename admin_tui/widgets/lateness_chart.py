"""Lateness as a picture: a sparkline per stage of the latest firings, and the split.

Two stages of a scheduled Run's lateness (docs/operations.md, "Metrics"): ``stored``, from
its due time to its create acknowledged, and ``started``, to its first ``start_session``
call. Both sparklines share one scale (the largest of either), so the gap between the two
lines is the time a Run waited between being stored and being started; the line under them
splits the median into the two parts. The scale is logarithmic (a millisecond to the
largest), so milliseconds and a stall of seconds both read; a firing late by more than
:data:`LATE_SECONDS` is red, as the processes table's p99.

The Cluster view draws the highlighted replica's latest firings (``ReplicaMetrics.
recent_lateness``); a Schedule's detail draws its own recent scheduled Runs
(:mod:`.schedule_lateness`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from ..formatting import lateness
from .replica_table import LATE_SECONDS
from .steady import update_changed

SPARKS = "▁▂▃▄▅▆▇█"
WIDTH = 80
"""Sparkline cells at most: more firings than that are drawn two or more to a cell (the
largest of them, so a spike never disappears)."""
STYLES = {"stored": "cyan", "started": "magenta"}
SPLIT_WIDTH = 40
FLOOR = 0.001
"""Lateness drawn as nothing: a millisecond (the scale is logarithmic above it)."""


def _cells(values: Sequence[float], width: int) -> list[float]:
    """``values`` in at most ``width`` cells, each the largest of the values it covers."""
    if len(values) <= width:
        return list(values)
    step = len(values) / width
    return [max(values[int(i * step):max(int((i + 1) * step), int(i * step) + 1)])
            for i in range(width)]


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def _level(value: float, top: float) -> int:
    """0..7 on a log scale from :data:`FLOOR` to ``top``: a few milliseconds and a stall of
    seconds both stay readable on one line."""
    if top <= FLOOR or value <= FLOOR:
        return 0
    return min(7, int(math.log(value / FLOOR) / math.log(top / FLOOR) * 7.999))


def sparkline(values: Sequence[float], top: float, style: str, width: int = WIDTH) -> Text:
    """One line of blocks, ``top`` full height (log scale); late firings red."""
    text = Text()
    for value in _cells(values, width):
        text.append(SPARKS[_level(value, top)],
                    style="bold red" if value >= LATE_SECONDS else style)
    return text


def lateness_picture(series: dict[str, Sequence[float]], what: str) -> Text:
    """The two sparklines with their p50 / p99 / max, and the split of the median."""
    shown = {stage: list(series.get(stage, ())) for stage in ("stored", "started")}
    count = max((len(v) for v in shown.values()), default=0)
    if count == 0:
        return Text(f"Lateness: no {what} yet.", style="dim")
    top = max(max(v) for v in shown.values() if v)
    text = Text.assemble(("Lateness", "bold"), f" of the latest {count} {what}, oldest first ",
                         ("(p50 / p99 / max)", "dim"), "\n")
    for stage, values in shown.items():
        text.append(f"{stage:<8} ", style=STYLES[stage])
        if not values:
            text.append("not recorded", style="dim")
        else:
            text.append_text(sparkline(values, top, STYLES[stage]))
            text.append(f"  {lateness(_percentile(values, 0.5))} / "
                        f"{lateness(_percentile(values, 0.99))} / {lateness(max(values))}")
        text.append("\n")
    text.append_text(split_text(shown["stored"], shown["started"]))
    return text


def split_text(stored: Sequence[float], started: Sequence[float]) -> Text:
    """``split    ████░░░ stored 4 ms, then 7 ms to start_session (p50)``."""
    text = Text("split    ", style="dim")
    if not stored or not started:
        return text.append("needs both stages", style="dim")
    first = _percentile(stored, 0.5)
    whole = max(_percentile(started, 0.5), first)
    filled = 0 if whole <= 0 else round(first / whole * SPLIT_WIDTH)
    text.append("█" * filled, style=STYLES["stored"])
    text.append("█" * (SPLIT_WIDTH - filled), style=STYLES["started"])
    text.append(f"  stored {lateness(first)}, then {lateness(whole - first)} to "
                "start_session (medians)")
    return text


class LatenessChart(Static):
    """:func:`lateness_picture` of what ``show`` is given."""

    def show(self, series: dict[str, Sequence[float]], what: str) -> None:
        update_changed(self, lateness_picture(series, what))

"""The line under the processes table: every figure the highlighted replica publishes.

The same figures as its OpenTelemetry metrics (docs/operations.md, "Metrics"), counted since
it started, so operators without a metrics pipeline see them; the table shows only a few.
A process that serves no actions gives no figures: the line says why it does not serve
(its key in the replicas bucket says it) and how to fix it.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from nats_scheduler.admin.api import ReplicaMetrics, ReplicaView
from nats_scheduler.admin.serving import why_not

from ..formatting import lateness
from .replica_table import skew_text


def _parts(counts: dict[str, int]) -> str:
    """``42`` or ``42 (run_now 2, schedule 40)``: a total and its parts by key."""
    total = sum(counts.values())
    inner = ", ".join(f"{key} {n}" for key, n in sorted(counts.items()))
    return f"{total} ({inner})" if inner else str(total)


def _lateness(metrics: ReplicaMetrics) -> str:
    shown = [f"{stage} {lateness(s.p50)} / {lateness(s.p99)}"
             for stage in ("stored", "started") if (s := metrics.lateness.get(stage))]
    if not shown:
        return "no firings yet"
    count = max(s.count for s in metrics.lateness.values())
    return f"{', '.join(shown)} (latest {count} firing{'' if count == 1 else 's'})"


def replica_text(replica: ReplicaView | None) -> Text:
    if replica is None:
        return Text("No provider process answered.", style="dim")
    if not replica.answered:
        return Text.assemble((replica.identity, "bold"), " serves no actions: ",
                             (why_not(replica.admin_service), "bold red"),
                             ".\nAlive (it beats), but it answers nothing: no figures.")
    text = Text.assemble((replica.identity, "bold"), " since it started")
    m = replica.metrics
    if m is None:
        text.append(": no figures (a version from before they were reported)", style="dim")
        return text
    schedules = ", ".join(f"{state} {m.schedules[state]}"
                          for state in ("active", "held", "disabled") if state in m.schedules)
    errors = ", ".join(f"{kind} {n}" for kind, n in sorted(m.store_errors.items()))
    text.append(f" · Schedules {schedules or 'none'} · Runs in flight {m.runs_in_flight}\n")
    text.append(f"Fire lateness p50 / p99: {_lateness(m)}\n")
    text.append(f"Runs created {_parts(m.runs_created)} · dispatched {_parts(m.runs_dispatched)}"
                f" · failed ")
    text.append(_parts(m.runs_failed), style="bold red" if m.runs_failed else "")
    text.append(f"\nAttempts {m.dispatch_attempts} · retries {m.dispatch_retries} · takeovers "
                f"{m.takeovers} · stale firing reads {m.stale_fire_reads} · store errors ")
    text.append(errors or "none", style="bold red" if "unavailable" in m.store_errors else "")
    if m.auto_holds or m.holds_ended:
        text.append(" · holds: auto-held ")
        text.append(str(m.auto_holds), style="bold red" if m.auto_holds else "")
        text.append(f", ended {m.holds_ended}")
    text.append("\nHost clock vs the store's: ")
    text.append_text(_offset(replica))
    if replica.refused_count:
        text.append_text(_refused(replica))
    return text


REFUSALS_SHOWN = 5
"""Refused Schedules named under the table (``nats-scheduler status`` prints more)."""


def _refused(replica: ReplicaView) -> Text:
    """The Schedules its reconcile refused: how many, the first ones with why."""
    text = Text("\nRefused Schedules ")
    text.append(str(replica.refused_count), style="bold red")
    text.append(" (each keeps its stored schedule, or has none)")
    for refusal in replica.refused[:REFUSALS_SHOWN]:
        text.append(f"\n  {refusal.deployment_id} ", style="bold")
        text.append(f"{refusal.kind}: {refusal.reason}")
    more = replica.refused_count - min(len(replica.refused), REFUSALS_SHOWN)
    if more > 0:
        text.append(f"\n  and {more} more (nats-scheduler status lists them)", style="dim")
    return text


def _offset(replica: ReplicaView) -> Text:
    """``+0.003 s ± 0.001 s`` (the replica's own measure), or why there is none."""
    if replica.server_offset is None:
        return Text("not measured (joining, the store unreachable, or an older version)",
                    style="dim")
    shown = skew_text(replica.server_offset)
    error = replica.server_offset_error or 0.0
    return Text.assemble((f"{replica.server_offset:+.3f} s", shown.style),
                         f" ± {error:.3f} s")


class ReplicaSummary(Static):
    def show(self, replica: ReplicaView | None) -> None:
        self.update(replica_text(replica))

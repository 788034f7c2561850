"""``status`` (cluster and health) and ``doctor`` (what the store can promise).

``status`` exits 7 when a health signal is raised (a silent stop, a stuck or a failed Run, a
Schedule a replica's reconcile refused), so a cron job or a monitoring probe can run it as
is. ``doctor`` exits 7 when a check fails.

``status`` counts every live replica from the replicas bucket, those that serve the admin
service and those that do not (the server refused it, say: ``admin/serving.py`` says why);
the figures come from the ones that answer.
"""

from __future__ import annotations

import argparse

import msgspec

from ..admin.api import ClusterStatus, Health, ReplicaMetrics, ReplicaView, RunView, StoreHealth
from ..admin.doctor import run_doctor
from ..admin.doctor_checks import Status, herd_check
from ..admin.serving import serving_cell, why_not
from ..admin.skew import store_offsets
from .common import (
    EXIT_OK,
    EXIT_UNHEALTHY,
    admin_client,
    connection_flags,
    output_flags,
    print_json,
    run_command,
    settings_from_args,
    table,
    when,
)


class StatusReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``status --json`` prints."""

    cluster: ClusterStatus
    health: Health
    source: str | None
    healthy: bool


def healthy(health: Health, status: ClusterStatus | None = None) -> bool:
    """No health signal raised, and no replica with a Schedule its reconcile refused."""
    refused = status is not None and any(r.refused_count for r in status.replicas)
    return not (health.silent_stops or health.stuck_runs or health.failed_runs
                or health.skipped_events or refused)


REFUSALS_SHOWN = 20
"""Refused Schedules printed per replica (``--json`` has every one the replica sent)."""


def refusal_lines(replicas: list[ReplicaView]) -> list[str]:
    """Which replica refused which deployments and why: a bounded list, with counts."""
    refusing = [r for r in replicas if r.refused_count]
    total = sum(r.refused_count for r in refusing)
    lines = [f"refused schedules: {total or 'none'}"
             + (" (each keeps its stored schedule, or has none; explain DEPLOYMENT)"
                if total else "")]
    for r in refusing:
        lines.append(f"  {r.identity}: {r.refused_count}")
        for refusal in r.refused[:REFUSALS_SHOWN]:
            lines.append(f"    {refusal.deployment_id}  {refusal.kind}  {refusal.reason}")
        shown = min(len(r.refused), REFUSALS_SHOWN)
        if r.refused_count > shown:
            lines.append(f"    ... and {r.refused_count - shown} more")
    return lines


def _runs(title: str, runs: list[RunView], count: int | None = None) -> list[str]:
    if not runs:
        return [f"{title}: none"]
    lines = [f"{title}: {len(runs) if count is None else count}"]
    for r in runs[:20]:
        lines.append(f"  {r.run_id}  {r.deployment_id}  {r.state.value}  "
                     f"updated {when(r.updated_at)}  {r.error or ''}".rstrip())
    if len(runs) > 20:
        lines.append(f"  ... and {len(runs) - 20} more")
    return lines


def retention_text(store: StoreHealth) -> str:
    """The history retention in force, as the index stream's limits say it."""
    if store.retention_days is None and store.retention_runs is None:
        return "not reported (no history index read; see nats-scheduler doctor)"
    age = ("no age limit" if store.retention_days is None
           else f"{store.retention_days:g} days")
    count = ("no count limit" if store.retention_runs is None
             else f"newest {store.retention_runs} Runs per deployment")
    return f"{age}, {count}"


def seconds(value: float) -> str:
    """A lateness: ``4ms`` below a second, ``1.2s`` below 100 s, ``312s`` above."""
    if value < 1:
        return f"{value * 1000:.0f}ms"
    return f"{value:.1f}s" if value < 100 else f"{value:.0f}s"


def _by_key(counts: dict[str, int]) -> str:
    return ", ".join(f"{key} {n}" for key, n in sorted(counts.items()))


def _counted(total: int, counts: dict[str, int]) -> str:
    """``42 (run_now 2, schedule 40)``: a total and, when there are any, its parts."""
    return f"{total} ({_by_key(counts)})" if counts else str(total)


def _firings(count: int) -> str:
    return f"{count} firing" if count == 1 else f"{count} firings"


def _p99s(m: ReplicaMetrics) -> str:
    """``STORED/STARTED`` p99 lateness for the table, ``-`` for a stage with no firing."""
    return "/".join(seconds(m.lateness[stage].p99) if stage in m.lateness else "-"
                    for stage in ("stored", "started"))


def metrics_line(m: ReplicaMetrics | None) -> str:
    """Every figure a replica publishes, on one line (the table shows a few of them)."""
    if m is None:
        return "no figures (a provider version from before they were reported)"
    late = ", ".join(f"{stage} {seconds(s.p50)}/{seconds(s.p99)} ({_firings(s.count)})"
                     for stage, s in sorted(m.lateness.items(), key=lambda kv: kv[0] != "stored"))
    schedules = ", ".join(f"{state} {m.schedules[state]}"
                          for state in ("active", "held", "disabled") if state in m.schedules)
    return "; ".join([
        f"lateness p50/p99 {late or 'no firings yet'}",
        f"Runs created {_counted(sum(m.runs_created.values()), m.runs_created)}, "
        f"dispatched {_counted(sum(m.runs_dispatched.values()), m.runs_dispatched)}, "
        f"failed {_counted(sum(m.runs_failed.values()), m.runs_failed)}",
        f"attempts {m.dispatch_attempts}, retries {m.dispatch_retries}, "
        f"takeovers {m.takeovers}, stale firing reads {m.stale_fire_reads}",
        f"store errors {_by_key(m.store_errors) or 'none'}",
        f"in flight {m.runs_in_flight}",
        f"Schedules {schedules or 'none'}",
        *([f"holds: auto-held {m.auto_holds}, ended {m.holds_ended}"]
          if m.auto_holds or m.holds_ended else []),
        *([f"refused Schedules {_by_key(m.schedules_refused)}"] if m.schedules_refused else []),
    ])


def offset_text(seconds: float | None) -> str:
    """A host clock against the store's: ``+0.003s``, ``-`` when not measured."""
    # round first, and + 0.0 turns a rounded -0.0 into 0.0 ("+0.000s", not "-0.000s")
    return "-" if seconds is None else f"{round(seconds, 3) + 0.0:+.3f}s"


def _replica_row(r: ReplicaView, offsets: dict[str, float]) -> list[object]:
    skew = offset_text(offsets.get(r.identity))
    m = r.metrics
    answered = [r.in_flight_count, r.schedules_planned] if r.answered else [None, None]
    return [r.identity, serving_cell(r.admin_service, answered=r.answered), when(r.started_at),
            skew, *answered,
            None if m is None else sum(m.runs_created.values()),
            None if m is None else sum(m.runs_failed.values()),
            None if m is None else _p99s(m)]


def _replicas(replicas: list[ReplicaView]) -> list[str]:
    """The replicas' table (a few figures), then one line per replica with all of them, or
    why it does not serve the admin service (then it gave no figures)."""
    offsets = store_offsets(replicas)
    table_text = table(["IDENTITY", "ACTIONS", "STARTED", "CLOCK VS STORE", "IN FLIGHT",
                        "PLANNED", "RUNS", "FAILED", "LATE P99 STORED/STARTED"],
                       [_replica_row(r, offsets) for r in replicas])
    lines = ["  " + line for line in table_text.splitlines()]
    lines.append("figures since each replica started:")
    lines += [f"  {r.identity}: {metrics_line(r.metrics)}" if r.answered else
              f"  {r.identity}: serves no actions: {why_not(r.admin_service)}; no figures"
              for r in replicas]
    return lines


def alive_text(replicas: list[ReplicaView]) -> str:
    """``replicas alive: 2 (1 serves actions)``: every live replica, and how many serve."""
    if not replicas:
        return "replicas alive: 0"
    serving = sum(1 for r in replicas if r.answered)
    return (f"replicas alive: {len(replicas)} ({serving} "
            f"{'serves' if serving == 1 else 'serve'} actions)")


def status_text(status: ClusterStatus, health: Health) -> str:
    store = status.store
    lines = [
        "store: " + ", ".join(part for part in (
            "reachable" if store.reachable else "NOT reachable",
            f"server {store.server_version}" if store.server_version else None,
            f"replicas {store.replicas}" if store.replicas else None,
            f"leader {store.leader}" if store.leader else None,
            store.detail) if part),
        f"history retention: {retention_text(store)}",
        alive_text(status.replicas),
    ]
    if status.replicas:
        lines += _replicas(status.replicas)
    lines.append(f"leases held: {status.lease_count}")
    for lease in status.leases:
        lines.append(f"  {lease.run_id}  by {lease.holder}  until {when(lease.expires_at)}")
    lines.append(f"in flight: {', '.join(status.in_flight) or 'none'}"
                 + _more(status.in_flight_count, status.in_flight))
    lines += refusal_lines(status.replicas)
    lines.append("health: " + ("ok" if healthy(health, status) else "PROBLEMS"))
    lines.append("  silent stops: " + (", ".join(health.silent_stops) or "none")
                 + _more(health.silent_stop_count, health.silent_stops))
    if health.server_offset is not None:
        lines.append(f"  clock vs store (answering replica): {offset_text(health.server_offset)}"
                     f" ±{health.server_offset_error or 0.0:.3f}s")
    if health.busiest_minute is not None:
        herd = herd_check((health.busiest_minute, health.busiest_due), health.live_replicas)
        warned = "WARNING: " if herd.status != Status.OK else ""
        lines.append(f"  busiest minute: {warned}{herd.detail}")
    for skipped in health.skipped_events:
        lines.append(f"  skipped events: {skipped}")
    lines += ["  " + line for line in _runs("stuck runs", health.stuck_runs,
                                             health.stuck_run_count)]
    lines += ["  " + line for line in _runs("failed runs (24 h)", health.failed_runs,
                                             health.failed_run_count)]
    return "\n".join(lines)


async def _status(args: argparse.Namespace) -> int:
    async with admin_client(args) as client:
        cluster = await client.cluster_status()
        source = client.last_source
        health = await client.health()
    ok = healthy(health, cluster)
    if args.json:
        print_json(StatusReport(cluster=cluster, health=health, source=source, healthy=ok))
    else:
        print(status_text(cluster, health), flush=True)
        if source == "store":
            print("(read from the store: no scheduler process answered)", flush=True)
    return EXIT_OK if ok else EXIT_UNHEALTHY


async def _doctor(args: argparse.Namespace) -> int:
    report = await run_doctor(settings_from_args(args), monitor_url=args.monitor_url)
    if args.json:
        print_json({"ok": report.ok, "checks": [
            {"name": c.name, "status": c.status.value, "detail": c.detail}
            for c in report.checks]})
    else:
        print(table(["CHECK", "STATUS", "DETAIL"],
                    [[c.name, c.status.value.upper(), c.detail] for c in report.checks]),
              flush=True)
    return EXIT_OK if report.ok else EXIT_UNHEALTHY


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parents = [connection_flags(), output_flags()]
    status = sub.add_parser("status", parents=parents,
                            help="replicas with their figures, leases, in-flight Runs, store "
                                 "and history retention, health")
    status.set_defaults(func=lambda a: run_command(a, _status))

    doctor = sub.add_parser("doctor", parents=parents,
                            help="check the server, its persistence, permissions and clocks")
    doctor.add_argument("--monitor-url", help="the server's monitoring URL(s), comma-separated "
                                              "(e.g. http://127.0.0.1:8222)")
    doctor.set_defaults(func=lambda a: run_command(a, _doctor))


def _more(count: int, listed: list[object]) -> str:
    """" (and N more)" when an answer listed only the first ones (admin/bounded.py)."""
    return f" (and {count - len(listed)} more)" if count > len(listed) else ""

"""``status`` (cluster and health) and ``doctor`` (what the store can promise).

``status`` exits 7 when a health signal is raised (a silent stop, a stuck or a failed Run),
so a cron job or a monitoring probe can run it as is. ``doctor`` exits 7 when a check fails.
"""

from __future__ import annotations

import argparse

import msgspec

from ..admin.api import ClusterStatus, Health, RunView
from ..admin.doctor import run_doctor
from ..admin.skew import clock_skews
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


def healthy(health: Health) -> bool:
    return not (health.silent_stops or health.stuck_runs or health.failed_runs)


def _runs(title: str, runs: list[RunView]) -> list[str]:
    if not runs:
        return [f"{title}: none"]
    lines = [f"{title}: {len(runs)}"]
    for r in runs[:20]:
        lines.append(f"  {r.run_id}  {r.deployment_id}  {r.state.value}  "
                     f"updated {when(r.updated_at)}  {r.error or ''}".rstrip())
    if len(runs) > 20:
        lines.append(f"  ... and {len(runs) - 20} more")
    return lines


def status_text(status: ClusterStatus, health: Health) -> str:
    store = status.store
    lines = [
        "store: " + ", ".join(part for part in (
            "reachable" if store.reachable else "NOT reachable",
            f"server {store.server_version}" if store.server_version else None,
            f"replicas {store.replicas}" if store.replicas else None,
            f"leader {store.leader}" if store.leader else None,
            store.detail) if part),
        f"replicas alive: {len(status.replicas)}",
    ]
    if status.replicas:
        skews = clock_skews(status.replicas)
        rows = []
        for r in status.replicas:
            # round first, and + 0.0 turns a rounded -0.0 into 0.0 ("+0.000s", not "-0.000s")
            skew = f"{round(skews[r.identity], 3) + 0.0:+.3f}s" if r.identity in skews else "-"
            rows.append([r.identity, when(r.started_at), skew, len(r.in_flight),
                         r.schedules_planned])
        table_text = table(["IDENTITY", "STARTED", "CLOCK SKEW", "IN FLIGHT", "PLANNED"],
                           rows)
        lines += ["  " + line for line in table_text.splitlines()]
    lines.append(f"leases held: {len(status.leases)}")
    for lease in status.leases:
        lines.append(f"  {lease.run_id}  by {lease.holder}  until {when(lease.expires_at)}")
    lines.append(f"in flight: {', '.join(status.in_flight) or 'none'}")
    lines.append("health: " + ("ok" if healthy(health) else "PROBLEMS"))
    lines.append("  silent stops: " + (", ".join(health.silent_stops) or "none"))
    lines += ["  " + line for line in _runs("stuck runs", health.stuck_runs)]
    lines += ["  " + line for line in _runs("failed runs (24 h)", health.failed_runs)]
    return "\n".join(lines)


async def _status(args: argparse.Namespace) -> int:
    async with admin_client(args) as client:
        cluster = await client.cluster_status()
        source = client.last_source
        health = await client.health()
    ok = healthy(health)
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
                            help="replicas, leases, in-flight Runs, store and health")
    status.set_defaults(func=lambda a: run_command(a, _status))

    doctor = sub.add_parser("doctor", parents=parents,
                            help="check the server, its persistence, permissions and clocks")
    doctor.add_argument("--monitor-url", help="the server's monitoring URL(s), comma-separated "
                                              "(e.g. http://127.0.0.1:8222)")
    doctor.set_defaults(func=lambda a: run_command(a, _doctor))

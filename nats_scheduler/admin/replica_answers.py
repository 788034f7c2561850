"""What one replica says of itself: its ``replica.status`` and its ``health``.

The admin service (``service.py``) serves both; built here from the provider the service
runs in (:class:`~.host.AdminHost`), each cut to fit one message (``bounded.py``).
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from .api import Health, ReplicaMetrics, ReplicaView
from .bounded import bounded_health, bounded_replica
from .health import HealthPolicy, build_health
from .herd_watch import BusiestMinute
from .host import AdminHost
from .reader import StoreReader, lease_expiries


def server_offset(provider: AdminHost) -> dict[str, float]:
    """``server_offset`` and its error, when this replica has a fresh estimate."""
    running = provider.runtime
    measured = None if running is None else running.server_offset()
    if measured is None:
        return {}
    offset, error = measured
    return {"server_offset": offset, "server_offset_error": error}


def replica_view(provider: AdminHost, *, started_at: datetime | None, now: datetime,
                 budget: int) -> ReplicaView:
    """This replica as ``replica.status`` answers: identity, Runs held, figures."""
    dispatcher, ticker = provider.dispatcher, provider.ticker
    running = provider.runtime
    return bounded_replica(ReplicaView(
        identity=provider.identity,
        started_at=started_at,
        now=now,
        in_flight=sorted(dispatcher.in_flight) if dispatcher is not None else [],
        schedules_planned=ticker.planned if ticker is not None else 0,
        ready=provider.ready,
        metrics=None if running is None else msgspec.convert(
            running.metrics.snapshot(), ReplicaMetrics, from_attributes=True),
        refused=[] if running is None else running.refusals.listed(),
        **server_offset(provider),
    ), budget, refused_total=None if running is None else running.refusals.count)


async def health_of(provider: AdminHost, reader: StoreReader, policy: HealthPolicy,
                    busiest: BusiestMinute, *, started_at: datetime | None, now: datetime,
                    budget: int) -> Health:
    """The health signals as this replica sees them (``health.py``), with what its
    projections skipped, the busiest minute ahead and its clock against the store's."""
    leases = lease_expiries(await reader.leases())
    live = provider.schedules.live()
    health = build_health(live, provider.ledger, leases, now, policy, alive_since=started_at)
    running = provider.runtime
    skipped = [f"{f.poisoned} skipped, last {f.last_poison}"
               for f in (running.followers if running else []) if f.poisoned]
    minute, due = await busiest.get(live, now)
    return bounded_health(msgspec.structs.replace(
        health, skipped_events=skipped, busiest_minute=minute, busiest_due=due,
        live_replicas=running.live_replicas() if running else None,
        **server_offset(provider)), budget)

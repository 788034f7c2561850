"""Each replica's host clock against the store's clock, and the bounds operators judge it by.

A replica fires due times, judges leases and stamps its events by the store's clock as it
measures it (``nats_scheduler/clock.py``, docs/architecture.md "One clock: the store's"), so
a host clock that is off no longer makes Runs early. It still matters where a replica has
no estimate (before the first sample of a start, or an hour after its last): there the
replica reads its host clock, off by exactly this offset.
Each replica reports the offset it measures (``ReplicaView.server_offset``); comparing
replicas with each other, or with an observer's clock after a round trip, would add the
request's latency and measure nothing the firing uses. ``nats-scheduler status``,
``doctor`` and the console's cluster view show these numbers with the same bounds.
"""

from __future__ import annotations

from collections.abc import Sequence

from .api import ReplicaView

OFFSET_WARN_SECONDS = 0.25
"""A host clock this far from the store's is worth a look: NTP keeps hosts within
milliseconds, so the daemon is struggling or gone."""

OFFSET_FAIL_SECONDS = 1.0
"""A host clock this far off fails ``doctor``: a replica without an estimate (a restart,
before its first sample) would fire due times early or late by that much, and Quartz's rule
for clustered schedulers is one second."""


def store_offsets(replicas: Sequence[ReplicaView]) -> dict[str, float]:
    """Identity -> host clock minus the store's (seconds), for replicas that measured it."""
    return {r.identity: r.server_offset for r in replicas if r.server_offset is not None}


def offset_level(seconds: float) -> str:
    """``ok``, ``warn`` or ``fail`` for an offset, by the bounds above."""
    size = abs(seconds)
    if size >= OFFSET_FAIL_SECONDS:
        return "fail"
    return "warn" if size >= OFFSET_WARN_SECONDS else "ok"

"""The replicas bucket as a reader sees it: every live replica, and whether it serves.

``status``, the console, the doctor and an action nobody answered count the live replicas
from here, not from the admin service's ``replica.status`` fan-out: a replica whose admin
service the server refuses still fires and still beats, but answers nothing. Readable by
whoever may read the bucket (the shipped config's operator and auditor do).

Judged as the replicas judge one another (``jetstream/presence.py``): a key is live while
its last put is within ``WINDOW_BEATS`` beats of the newest put in the bucket, both by the
server's timestamps, so no reader's clock is involved. A replica that stopped deletes its
key and leaves at once; a killed one stays listed until the bucket's ``max_age`` removes its
key (30 s), or until a live replica's puts are a window newer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from nats.aio.client import Client

from ..names import HDR_KV_OPERATION, Names
from .foreign import ForeignMessage
from .presence import BEAT_SECONDS, WINDOW_BEATS, replica_value_on
from .store_reads import Stored, last_per_subject


@dataclass(frozen=True)
class LiveReplica:
    """One live replica as its key in the replicas bucket says."""

    identity: str
    started_at: datetime | None
    admin_service: str | None
    """Its :class:`~nats_scheduler.core.serving.Serving` word; None from a replica of a
    version from before it."""


def _replica(item: Stored, names: Names) -> LiveReplica | None:
    """The replica a key's value announces; None for a value that is not a replica's
    (foreign: jetstream/foreign.py), which is no sign of a live replica."""
    try:
        value = replica_value_on(names, item.subject, item.data)
    except ForeignMessage:
        return None
    return LiveReplica(identity=value.identity, started_at=value.started_at,
                       admin_service=value.admin_service)


def live_replicas(stored: Sequence[Stored], names: Names, *,
                  window: float = WINDOW_BEATS * BEAT_SECONDS) -> list[LiveReplica]:
    """The live replicas among the last message of every key, sorted by identity.

    A deleted key (its last message a delete marker) is gone; the others are live while
    their last put is within ``window`` seconds of the newest message, by the server's
    stamps. A message without a stamp counts as the newest (the reader could not tell)."""
    stamps = [s.stored_at.timestamp() for s in stored if s.stored_at is not None]
    newest = max(stamps, default=0.0)
    found: dict[str, LiveReplica] = {}
    for item in stored:
        if item.headers.get(HDR_KV_OPERATION) in ("DEL", "PURGE") or not item.data:
            continue
        put = newest if item.stored_at is None else item.stored_at.timestamp()
        if newest - put >= window:
            continue
        replica = _replica(item, names)
        if replica is not None:
            found[replica.identity] = replica
    return sorted(found.values(), key=lambda r: r.identity)


async def read_live_replicas(nc: Client, names: Names, *,
                             timeout: float = 5.0) -> list[LiveReplica]:
    """Every live replica, read from the replicas bucket (empty when it does not exist).
    Raises the engine's errors (the caller words them)."""
    stored = await last_per_subject(nc, names.replicas_stream, names.replicas_filter,
                                    timeout=timeout)
    return live_replicas(stored, names)


__all__ = ["LiveReplica", "live_replicas", "read_live_replicas"]

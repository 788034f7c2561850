"""This replica among the live ones: who owns which due time, and the store's clock.

Joining the live replicas (:mod:`nats_scheduler.ports.replicas`) gives every due time
and every retention slice one owner among the live replicas (rendezvous hashing,
:mod:`nats_scheduler.core.ownership`). The same beat, a put every second, is timed against
the server's stamp on it and feeds this replica's estimate of the store's clock
(:mod:`nats_scheduler.core.serverclock`; docs/architecture.md, "One clock: the store's").

A replica that cannot join (a server or configuration that refuses the bucket) owns
everything: correct (the store lets one Run per due time win), only more work for the store
when several replicas run.
"""

from __future__ import annotations

import logging
from datetime import datetime

from ..clock import Clock, ServerClock
from ..core.ownership import owner, owner_key
from ..core.serverclock import Sample
from ..ports.replicas import Members, ReplicaRegistry
from .metrics import Metrics

log = logging.getLogger(__name__)


class Membership:
    """The live replicas as this one sees them, once :meth:`join` has run."""

    def __init__(self, replicas: ReplicaRegistry, identity: str, clock: Clock,
                 metrics: Metrics) -> None:
        self._replicas = replicas
        self._identity = identity
        self._clock = clock
        self._metrics = metrics
        self.presence: Members | None = None

    async def join(self) -> None:
        """Put this replica's key and watch the others' (a warning, never a failure)."""
        clock = self._clock
        try:
            presence = await self._replicas.open(
                self._identity, clock=clock,
                **({"on_sample": self._observe, "wall": clock.wall_seconds}
                   if isinstance(clock, ServerClock) else {}))
            await presence.start()
        except Exception as exc:
            log.warning("could not join the live replicas (%s); this replica fires every "
                        "due time itself", exc)
            return
        self.presence = presence

    async def leave(self) -> None:
        """Delete this replica's key: the others own its due times at once."""
        presence, self.presence = self.presence, None
        if presence is not None:
            await presence.stop()

    def owns(self, key: str) -> bool:
        """Whether this replica owns ``key`` among the live ones (all of it when alone)."""
        presence = self.presence
        if presence is None:
            return True
        members = presence.live()
        return len(members) == 1 or owner(members, key) == self._identity

    def owns_due(self, deployment_id: str, due: datetime) -> bool:
        """Whether this replica fires ``deployment_id``'s due time ``due`` first."""
        return self.owns(owner_key(deployment_id, due))

    def live_replicas(self) -> int:
        """How many replicas this one counts live, itself included (1 when alone)."""
        return len(self.presence.live()) if self.presence is not None else 1

    def server_offset(self) -> tuple[float, float] | None:
        """This host's clock minus the store's and its error bound (seconds); None unknown."""
        clock = self._clock
        estimate = clock.estimate() if isinstance(clock, ServerClock) else None
        return None if estimate is None else (estimate.wall_offset, estimate.wall_error)

    def _observe(self, sample: Sample) -> None:
        """One beat's timing: the store's clock estimated again, the offset gauge."""
        clock = self._clock
        assert isinstance(clock, ServerClock)
        clock.observe(sample)
        offset = clock.offset()
        if offset is not None:
            self._metrics.clock_offset(offset)

"""This replica among the live ones: who owns which due time, and the store's clock.

Joining the live replicas (:mod:`nats_scheduler.ports.replicas`) gives every due time
and every retention slice one owner among the live replicas (rendezvous hashing,
:mod:`nats_scheduler.core.ownership`). The same beat, a put every second, is timed against
the server's stamp on it and feeds this replica's estimate of the store's clock
(:mod:`nats_scheduler.core.serverclock`; docs/architecture.md, "One clock: the store's").

A replica never decides it is alone because it is busy. Who is live is judged on what the
store says (the other replicas' puts, by the server's timestamps), never on this process's
own time-outs. A join that the store does not answer in time (its event loop busy with a
million Schedules, the store slow) is tried again in the background until it succeeds;
while it cannot tell, the replica owns what it owned by the last membership it saw, or
nothing if it never saw one, and the owner patience (``runtime/ticker.py``) still hands it
any due time nobody fired. Only a store that refuses the registry outright
(:class:`~nats_scheduler.ports.replicas.RegistryRefused`: a configuration without it) makes
a replica own everything: there is no membership to wait for.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from datetime import datetime

from ..clock import Clock, ServerClock
from ..core.ownership import owner, owner_key
from ..core.serverclock import Sample
from ..core.serving import Serving
from ..ports.replicas import Members, RegistryRefused, ReplicaRegistry
from ..tasks import cancel_and_wait
from .metrics import Metrics

log = logging.getLogger(__name__)

JOIN_SECONDS = 10.0
"""How long one attempt to join may take before it is given up and tried again."""

JOIN_RETRY_SECONDS = (0.5, 1.0, 2.0, 5.0)
"""Pauses between attempts to join, the last one repeated."""

STOP_SECONDS = 5.0
"""How long ``leave`` waits for an attempt to join in progress to end."""


class Membership:
    """The live replicas as this one sees them, once :meth:`join` has run."""

    def __init__(self, replicas: ReplicaRegistry, identity: str, clock: Clock,
                 metrics: Metrics, *, serving: Callable[[], Serving] | None = None) -> None:
        self._replicas = replicas
        self._serving = serving
        """Whether this replica serves the admin service: its key says so at each beat, so
        ``status`` counts it even when the server refuses the service."""
        self._identity = identity
        self._clock = clock
        self._metrics = metrics
        self.presence: Members | None = None
        self._last: tuple[str, ...] | None = None
        """The last membership this replica saw (None: it never saw one)."""
        self._refused = False
        """The store refused the replicas bucket: nobody can join, everybody owns all."""
        self._joining: asyncio.Task[None] | None = None
        self._opened: Members | None = None
        """The membership of an attempt to join in progress (``announce`` reaches it)."""
        self.attempts = 0
        """Attempts to join made so far (the first included)."""

    async def join(self) -> None:
        """Put this replica's key and watch the others'. If the store does not answer in
        time, the attempt is repeated in the background until it succeeds (a warning,
        never a failure)."""
        if await self._attempt():
            return
        self._joining = asyncio.create_task(self._join_until_joined(), name="joining")

    async def _join_until_joined(self) -> None:
        for attempt in itertools.count():
            await asyncio.sleep(JOIN_RETRY_SECONDS[min(attempt, len(JOIN_RETRY_SECONDS) - 1)])
            if await self._attempt():
                log.info("joined the live replicas after %d attempts", self.attempts)
                return

    async def _attempt(self) -> bool:
        """One attempt to join; whether it succeeded."""
        self.attempts += 1
        clock = self._clock
        presence: Members | None = None
        try:
            async with asyncio.timeout(JOIN_SECONDS):
                presence = self._opened = await self._replicas.open(
                    self._identity, clock=clock, serving=self._serving,
                    **({"on_sample": self._observe, "wall": clock.wall_seconds}
                       if isinstance(clock, ServerClock) else {}))
                await presence.start()
        except Exception as exc:
            self._opened = None
            if presence is not None:
                with contextlib.suppress(Exception):
                    await presence.stop()  # bounded: a half-started attempt leaves nothing
            self._not_joined(exc)
            return False
        self.presence, self._refused, self._opened = presence, False, None
        return True

    def _not_joined(self, exc: Exception) -> None:
        refused = isinstance(exc, RegistryRefused)
        if refused and not self._refused:
            log.warning("the store refuses the live replicas' registry (%s); this replica "
                        "fires every due time itself", exc)
        elif not refused and self.attempts == 1:
            log.warning("could not join the live replicas yet (%s); trying again. Meanwhile "
                        "this replica fires what it owned by the last membership it saw, and "
                        "the others' due times only once their owner's patience has passed",
                        str(exc) or type(exc).__name__)
        self._refused = refused

    async def leave(self) -> None:
        """Delete this replica's key: the others own its due times at once."""
        joining, self._joining = self._joining, None
        if joining is not None:
            await cancel_and_wait([joining], timeout=STOP_SECONDS)
        presence, self.presence, self._opened = self.presence, None, None
        if presence is not None:
            await presence.stop()

    async def announce(self) -> None:
        """Put this replica's key now: whether it serves the admin service changed (while
        an attempt to join is under way too: its first put may have read the old word)."""
        presence = self.presence or self._opened
        if presence is not None:
            await presence.announce()

    def members(self) -> tuple[str, ...] | None:
        """The live replicas as the store last showed them (this one included); None when
        this replica cannot tell (it never joined)."""
        presence = self.presence
        if presence is not None:
            self._last = presence.live()
        return self._last

    def owns(self, key: str) -> bool:
        """Whether this replica owns ``key`` among the live ones (all of it when alone)."""
        members = self.members()
        if members is None:
            return self._refused  # cannot tell: the owner patience decides, unless refused
        return len(members) == 1 or owner(members, key) == self._identity

    def owns_due(self, deployment_id: str, due: datetime) -> bool:
        """Whether this replica fires ``deployment_id``'s due time ``due`` first."""
        return self.owns(owner_key(deployment_id, due))

    def live_replicas(self) -> int:
        """How many replicas this one counts live, itself included (1 when alone)."""
        members = self.members()
        return 1 if members is None else len(members)

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

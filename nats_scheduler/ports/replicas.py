"""The live replicas: which provider processes are running, and the store's clock.

Each replica joins (puts its record), beats (puts it again every ``beat_seconds``) and
leaves (deletes it); every replica watches the others'. A replica is live while its record's
last put is within ``3 * beat_seconds`` of the newest put this process has read, both by the
STORE's timestamps on them: replicas' wall clocks are never compared, and neither this
process's own time-outs nor its elapsed time drop anybody (a replica whose event loop is
busy reads the others' puts late, but in order; until it has read newer ones, nobody
stopped). A replica always counts itself. The beat is also this replica's measure of the
store's clock: the elapsed time around each put and the store's timestamp on it make one
:class:`~nats_scheduler.core.serverclock.Sample` per beat. The record also says whether the
replica serves the admin service (:class:`~nats_scheduler.core.serving.Serving`, read at each
beat), so a replica that fires but does not serve is still counted (``status``, ``doctor``).

Membership only decides who fires a due time first (``runtime/membership.py``); it is never
what makes a Run unique, so a wrong answer costs work, not correctness.

Implementations: ``jetstream/presence.py`` (a KV bucket) and ``memory/replicas.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from ..clock import Clock
from ..core.serverclock import Sample
from ..core.serving import Serving


class RegistryRefused(Exception):
    """The store refuses this scheduler the registry itself (a configuration without it), as
    opposed to not answering in time: joining again will not help."""


class Members(Protocol):
    """This replica's membership, once opened."""

    async def start(self) -> None:
        """Put this replica's record, watch the others', beat. Raises when the first put
        fails (:class:`RegistryRefused` when the store refuses the registry outright);
        returns once the records stored before are known (bounded)."""
        ...

    async def stop(self) -> None:
        """Leave: stop beating, delete this replica's record (the others drop it at once).
        Bounded: with the store gone the record stops changing and ages out instead."""
        ...

    def live(self) -> tuple[str, ...]:
        """Sorted identities of the live replicas, always including this one."""
        ...

    async def announce(self) -> None:
        """Put this replica's record now, not at the next beat (whether it serves the admin
        service changed). Bounded; a failure is only logged (the next beat carries it)."""
        ...


class ReplicaRegistry(Protocol):
    """Where replicas announce themselves."""

    async def open(self, identity: str, *, clock: Clock,
                   on_sample: Callable[[Sample], None] | None = None,
                   wall: Callable[[], float] | None = None,
                   serving: Callable[[], Serving] | None = None) -> Members:
        """This replica's membership (not started). ``on_sample`` gets one sample of the
        store's clock per beat, ``wall`` is the host's clock for the offset people read,
        ``serving`` says at each beat whether this replica serves the admin service (the
        record says nothing of it without one).
        :class:`RegistryRefused` when the store refuses the registry outright."""
        ...

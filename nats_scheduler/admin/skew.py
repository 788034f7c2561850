"""Replicas' clock skew, measured the one way that needs no round trip.

Every replica answers the same ``replica.status`` request with its own ``now`` within
milliseconds of the others, so comparing each with the replicas' median shows how far the
replicas disagree, which is what leases depend on (one replica takes over another's lease
by its own clock). Comparing with the observer's clock *after* the round trip would add
the request's latency to every replica: one machine would look a third of a second off.
``nats-scheduler status`` and the console's cluster view both show these numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

from .api import ReplicaView


def clock_skews(replicas: Sequence[ReplicaView]) -> dict[str, float]:
    """Each replica's clock minus the replicas' median clock, in seconds.

    With an even number of replicas the upper middle one is the reference (its own skew
    is 0), so a single odd one out shows as the one that is off. Replicas that did not
    report a clock are left out.
    """
    clocks = {r.identity: r.now for r in replicas if r.now is not None}
    if not clocks:
        return {}
    ordered = sorted(clocks.values())
    median = ordered[len(ordered) // 2]
    return {identity: (at - median).total_seconds() for identity, at in clocks.items()}

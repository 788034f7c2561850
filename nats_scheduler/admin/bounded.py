"""Fitting an admin answer whose lists grow with the Schedules or Runs into one message.

``cluster.status`` lists every live lease and every Run in flight, ``health`` every silent
stop, stuck Run and failed Run of the day, and ``replica.status`` the Runs a replica holds
and the Schedules its reconcile refused.
Each grows with the number of Schedules or Runs: after an incident at 100,000 Schedules a
list of silent stops alone is megabytes, past the server's largest message, and an answer
that does not fit is no answer at all. So each list is cut to its share of a byte budget
(half the server's largest message) in the order it is given (the most useful first), and
the answer carries each list's full length beside it (``*_total``): the count is exact
whatever was cut, and the console and the command line say how many were left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import msgspec

from .api import ClusterStatus, Health, ReplicaView

T = TypeVar("T")

_encoder = msgspec.json.Encoder()

PAGE_BYTES_MIN = 64 * 1024
"""The least a page of the Schedule list (or of a bulk action's IDs) may hold, when the
server's largest message is unknown."""

REPLICA_IN_FLIGHT_SHARE = 0.1
"""Of the budget, what one replica's ``replica.status`` may spend on its in-flight Runs
(several replicas' answers are gathered into one ``cluster.status``)."""


def reply_budget(max_payload: int) -> int:
    """Bytes an answer's growing lists may take: half the server's largest message (64 KiB
    of a 128 KiB guess when it is not known), the rest is room for everything else."""
    return (max_payload or 128 * 1024) // 2


def fit(items: Sequence[T], budget: int) -> list[T]:
    """The longest prefix of ``items`` whose JSON takes at most ``budget`` bytes."""
    kept: list[T] = []
    used = 2  # the brackets
    for item in items:
        used += len(_encoder.encode(item)) + 1  # and its comma
        if used > budget:
            break
        kept.append(item)
    return kept


REPLICA_REFUSED_SHARE = 0.05
"""Of the budget, what one replica may spend on the Schedules its reconcile refused."""


def bounded_replica(view: ReplicaView, budget: int, refused_total: int | None = None
                    ) -> ReplicaView:
    """``view`` with its in-flight Runs and its refused Schedules cut to a share of
    ``budget`` each, their counts kept (``refused_total``: when the replica counts more
    refusals than it names)."""
    in_flight = fit(view.in_flight, int(budget * REPLICA_IN_FLIGHT_SHARE))
    refused = fit(view.refused, int(budget * REPLICA_REFUSED_SHARE))
    return msgspec.structs.replace(
        view, in_flight=in_flight, in_flight_total=len(view.in_flight), refused=refused,
        refused_total=len(view.refused) if refused_total is None else refused_total)


def bounded_cluster_status(status: ClusterStatus, budget: int) -> ClusterStatus:
    """``status`` with leases and in-flight Runs cut to what fits beside the replicas."""
    rest = max(0, budget - len(_encoder.encode(status.replicas)))
    return msgspec.structs.replace(
        status, leases=fit(status.leases, rest // 2), leases_total=len(status.leases),
        in_flight=fit(status.in_flight, rest // 2), in_flight_total=len(status.in_flight))


def bounded_health(health: Health, budget: int) -> Health:
    """``health`` with each signal's list cut to a third of ``budget``, their counts kept."""
    share = budget // 3
    return msgspec.structs.replace(
        health,
        silent_stops=fit(health.silent_stops, share),
        silent_stops_total=len(health.silent_stops),
        stuck_runs=fit(health.stuck_runs, share), stuck_runs_total=len(health.stuck_runs),
        failed_runs=fit(health.failed_runs, share),
        failed_runs_total=len(health.failed_runs))

"""Whether a replica that just started ends an outage, and which: the decision, no I/O.

A replica that starts after every other one stopped must leave a durable record of the
span in which none ran, because the due times inside it were skipped by the rules and the
account of due times (:mod:`.dueaccount`) must say so. The record costs one write per
outage, none while any replica runs, so the replica decides from what the store already
holds (``runtime/outage_watch.py`` reads it, a few seconds after joining the live replicas):

- *covered*: another replica ran across this one's start. Its key in the replicas bucket
  was put at or after the start by a replica that had joined before it, or it left at or
  after the start; or the newest outage record was stored at or after the start by a
  replica that had started before it. Then there was no outage. Of replicas starting
  together (each inside the other's clock uncertainty) the first by ``(started_at, name)``
  is the one not covered: exactly one of them records.
- otherwise the outage began at the newest sign of life stored before the start (the
  newest write of any kind: every write is a process's, and every live replica writes its
  presence each second, so on a cluster that stopped it is the last replica's last beat or
  leave), and ends at the start.
- an outage the newest record already covers (another replica starting at the same time
  recorded it first) is not recorded twice.

All instants are the server's: stored timestamps, and a start measured on the store's clock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from . import calendar
from .dueaccount import Outage
from .events import ScheduleRecord


@dataclass(frozen=True)
class Sign:
    """A sign of life: something a provider process stored at ``at`` (server time)."""

    at: datetime
    what: str
    """In words, for the record: "the last Run event", "replica host-a left", ..."""


@dataclass(frozen=True)
class Peer:
    """Another replica's key in the replicas bucket as stored now."""

    name: str
    stamp: datetime
    """When its newest put or its leave was stored."""
    left: bool
    started_at: datetime | None
    """When it joined, by its own value (None for a leave)."""


@dataclass(frozen=True)
class LastRecord:
    """The newest outage record: the span it names and when it was stored."""

    start: datetime
    end: datetime
    stored_at: datetime


def covered(began: datetime, peers: Sequence[Peer], last: LastRecord | None,
            own: tuple[datetime, str] | None = None) -> bool:
    """Whether another replica ran across ``began`` (see the module docstring).

    ``own``: this replica's ``started_at`` and name as its key holds them. A live peer that
    started first covers this start; replicas that started together (within their clocks'
    uncertainty, where each start is at or before the other's ``began``) are ordered by
    ``(started_at, name)``, so exactly one of them, the first, is not covered and records.
    Without ``own`` a live peer covers when it started at or before ``began``.
    """
    for peer in peers:
        if peer.stamp < began:
            continue
        if peer.left:
            return True
        if peer.started_at is None:
            continue
        if own is None:
            if peer.started_at <= began:
                return True
        elif (peer.started_at, peer.name) < own:
            return True
    return last is not None and last.end <= began <= last.stored_at


def outage_before(began: datetime, signs: Sequence[Sign], peers: Sequence[Peer],
                  last: LastRecord | None,
                  own: tuple[datetime, str] | None = None) -> Outage | None:
    """The outage this start ends, or None: covered, nothing ever stored, or recorded.
    ``own``: see :func:`covered`."""
    if covered(began, peers, last, own):
        return None
    evidence = [s for s in signs if s.at < began]
    evidence += [Sign(p.stamp, f"replica {p.name} {'left' if p.left else 'beat last'}")
                 for p in peers if p.stamp < began]
    if not evidence:
        return None  # nothing ever ran here before: a new store
    newest = max(evidence, key=lambda s: s.at)
    if last is not None and last.start < began and last.end >= newest.at:
        return None  # a replica that started with this one recorded the same outage
    return Outage(newest.at, began, newest.what)


def skipped_during(records: Iterable[ScheduleRecord], outage: Outage,
                   limit: int = 100_000) -> int:
    """How many due times the outage skipped: those of each Schedule active through it.

    A Schedule changed since the outage began (``updated_at`` after its start) is left out:
    its state during the outage is not the one held now. Schedules that share a calendar
    share one computation, and the count stops at ``limit`` (a metric, not an account: the
    work stays a fraction of a second whatever the outage's length).
    """
    if outage.end is None:
        return 0
    calendars: Counter[tuple[str, str]] = Counter(
        (r.cron, r.timezone) for r in records if r.active and r.updated_at <= outage.start)
    total = 0
    for (cron, timezone), schedules in calendars.items():
        try:
            dues = calendar.due_times(cron, timezone, outage.start, outage.end)
        except ValueError:
            continue
        total += len(dues) * schedules
        if total >= limit:
            return limit
    return total

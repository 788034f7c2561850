"""What the invariant checker judges: the stored events, the handler's calls, the windows
in which replicas were alive, and the tolerances (``admin/invariants.py`` runs the checks).

Plain data, no I/O: ``admin/stored_events.py`` reads them from a store, the tests build them
by hand.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from ..core.dueaccount import Outage
from ..core.events import AnyEvent, RunEventType, ScheduleEvent
from ..core.pause_visibility import PAUSE_VISIBILITY_SECONDS
from ..jetstream.leases import LeaseValue
from ..projections.ledger import Ledger
from .invariant_report import Violation

EARLY_TOLERANCE = 0.05
"""Seconds a scheduled Run may be stored (or claimed) before its due time by the server's
timestamps and still not be ``early``. A replica fires by the lower bound of the server's
clock (docs/architecture.md, "One clock: the store's"), so its create reaches the server
after the due time; the tolerance covers the two clocks' rates drifting between samples
(at most ``FRESH_SECONDS`` x a few hundred ppm: a few milliseconds) and the servers of a
cluster disagreeing with each other by some milliseconds (the presence bucket's leader
stamps the samples, the Run stream's leader the Runs)."""


@dataclass(frozen=True)
class StoredEvent:
    """One stored message: stream sequence, subject, server time of storing, the event.

    ``event`` is None when the message did not decode; ``error`` then says why.
    """

    seq: int
    subject: str
    stored_at: datetime
    event: AnyEvent | None
    error: str | None = None

    @property
    def type(self) -> str:
        if self.event is None:
            return "?"
        return str(type(self.event).__struct_config__.tag)


@dataclass(frozen=True)
class HandlerCall:
    """One call the handler (AstraBox) received, as its own record says.

    ``at`` is when the handler recorded the call, on its host's clock; ``session_id`` the
    Session ID passed in; ``returned`` what the call returned (ok calls), when recorded.
    """

    at: datetime
    method: str
    run_id: str
    session_id: str | None = None
    process: str = ""
    outcome: str = "ok"
    returned: str | None = None


@dataclass(frozen=True)
class Window:
    """An interval in which a replica was running and responsive (``identity``: which)."""

    start: datetime
    end: datetime
    identity: str | None = None

    def covers(self, start: datetime, end: datetime) -> bool:
        return self.start <= start and end <= self.end


@dataclass(frozen=True)
class AccountFacts:
    """What the store says beyond the events: the outages and how far back it can answer."""

    outages: Sequence[Outage] = ()
    accounted_since: datetime | None = None
    """When the store began to record outages; None: it records none (not judged)."""
    retention_days: float | None = None
    retention_runs: int | None = None


@dataclass(frozen=True)
class History:
    """Every stored event of one prefix, in stream order, and the leases stored now.

    ``account``: the outages the store recorded (and the one going on) and how far back it
    can answer (:class:`AccountFacts`); None: ``unexplained`` is not judged.
    """

    prefix: str
    runs: Sequence[StoredEvent]
    schedules: Sequence[StoredEvent]
    leases: Mapping[str, LeaseValue] = field(default_factory=dict)
    read_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    account: AccountFacts | None = None
    foreign: Sequence[Violation] = ()
    """The foreign messages of the index, buckets, outage records and checkpoints
    (``foreign_scan.py``): reported as they are."""


@dataclass(frozen=True)
class Options:
    """What the caller knows beyond the store, and the tolerances of the checks."""

    calls: Sequence[HandlerCall] | None = None
    """The handler's record of calls; None skips the checks that need it."""
    ledger: Ledger | None = None
    """A provider's Run ledger to compare with the replay (caught up with the store)."""
    windows: Sequence[Window] = ()
    """When replicas were alive; with them, due times are expected and bounded, and
    takeovers judged."""
    ticker_only: bool = True
    """Only the replicas' tickers fired due times (so it is in production). False when a
    test also fired due times by hand: the windows then judge only takeovers."""
    expected: Iterable[tuple[str, datetime]] | None = None
    """(deployment, due time) pairs that must each have exactly one Run."""
    now: datetime | None = None
    """The instant of judgement (default: when the history was read)."""
    grace: float = 30.0
    """Seconds an unfinished Run (or an expected due time) may legitimately be in flight."""
    margin: float = 2.0
    """Seconds around window edges and Schedule changes in which a due time is not expected."""
    pause_visibility: float = PAUSE_VISIBILITY_SECONDS
    lease_seconds: float = 5.0
    clock_tolerance: float = 0.5
    """Seconds the handler's clock may disagree with the server's."""
    skew: float = 0.0
    """Seconds a replica's clock may have run ahead: it fires due times that early, so a
    due time up to this far after a window is not invented."""
    early_tolerance: float | None = EARLY_TOLERANCE
    """Seconds a scheduled Run may be stored before its due time (``early``); None skips it
    (a provider driven by a hand-moved clock)."""


RunHistory = list[tuple[StoredEvent, RunEventType]]
ScheduleHistory = list[tuple[StoredEvent, ScheduleEvent]]
"""A Run's or a Schedule's valid events so far, each with the message that stored it."""

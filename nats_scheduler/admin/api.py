"""The admin API: request and answer types, error codes, and the backend protocol.

The service (``service.py``, built on ``nats.micro``, endpoints under ``<PREFIX>.admin.``),
the client (``client.py``) and the console (``admin_tui``) all speak these types. Every
answer is JSON; an error answer is ``{"error": {"code": ..., "message": ...}}`` with a code
from :class:`ErrorCode` (stable: scripts match on it) and a message in AstraBox's words.

Endpoint subjects (``P`` = ``ASTRABOX_NATS_PREFIX``)::

    P.admin.schedules.list      ScheduleListRequest   -> ScheduleList
    P.admin.schedules.get       ScheduleRef           -> ScheduleDetail
    P.admin.schedules.hold      OperatorAction        -> ScheduleView
    P.admin.schedules.release   OperatorAction        -> ScheduleView
    P.admin.schedules.hold_bulk    BulkAction         -> BulkResult
    P.admin.schedules.release_bulk BulkAction         -> BulkResult
    P.admin.schedules.explain   ExplainRequest        -> DueAccount
    P.admin.schedules.load      LoadRequest           -> LoadAhead
    P.admin.runs.list           RunListRequest        -> RunList
    P.admin.runs.get            RunRef                -> RunView
    P.admin.runs.run_now        RunNowRequest         -> RunView
    P.admin.runs.replay         ReplayRequest         -> RunView
    P.admin.cluster.status      EmptyRequest          -> ClusterStatus
    P.admin.health              EmptyRequest          -> Health

The request types (``request_api.py``) refuse fields they do not know; answers ignore them
(forward compatible). An endpoint past its concurrency limit answers ``unavailable`` at once
with ``retry_after`` set (``admission.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

import msgspec

from ..core.dueaccount import DueTime
from ..core.events import RunRecord, ScheduleRecord
from ..core.refusals import Refusal
from ..seam import RunState
from .load_api import LoadAhead as LoadAhead  # the load's types, re-exported
from .load_api import LoadMinute as LoadMinute
from .request_api import BulkAction as BulkAction  # the request types, re-exported
from .request_api import EmptyRequest as EmptyRequest
from .request_api import ExplainRequest as ExplainRequest
from .request_api import LoadRequest as LoadRequest
from .request_api import OperatorAction as OperatorAction
from .request_api import ReplayRequest as ReplayRequest
from .request_api import Request as Request
from .request_api import RunListRequest as RunListRequest
from .request_api import RunNowRequest as RunNowRequest
from .request_api import RunRef as RunRef
from .request_api import ScheduleListRequest as ScheduleListRequest
from .request_api import ScheduleRef as ScheduleRef


class ErrorCode(StrEnum):
    """Stable error codes of the admin API."""

    INVALID_REQUEST = "invalid_request"
    NOT_FOUND = "not_found"
    FORBIDDEN = "forbidden"
    UNAVAILABLE = "unavailable"
    CONFLICT = "conflict"
    INTERNAL = "internal"


class AdminError(Exception):
    """An admin request failed; ``code`` is one of :class:`ErrorCode`. ``retry_after``: the
    service was busy and took nothing on; asking again after this many seconds may work."""

    def __init__(self, code: ErrorCode, message: str, *,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after = retry_after


class ErrorBody(msgspec.Struct, frozen=True, omit_defaults=True):
    code: ErrorCode
    message: str
    retry_after: float | None = None
    """Set only on a busy answer (``unavailable``, the endpoint at its concurrency limit):
    nothing was done, ask again after this many seconds. Clients older than the field
    ignore it."""


class ErrorAnswer(msgspec.Struct, frozen=True):
    error: ErrorBody


# ----------------------------------------------------------------------------- views


class ScheduleView(ScheduleRecord, frozen=True, kw_only=True):
    """One Schedule as operators see it: the stored record plus what is derived from it."""

    state: str  # "enabled" | "disabled" | "held" | "deleted"
    next_due: list[datetime] = []
    last_run_state: RunState | None = None
    last_run_at: datetime | None = None
    failures_24h: int = 0


RunView = RunRecord
"""One Run of the ledger as operators see it: the stored record (the seam's Run plus who
asked, why, and the dispatch bookkeeping)."""


class ScheduleDetail(msgspec.Struct, frozen=True, kw_only=True):
    schedule: ScheduleView
    upcoming: list[datetime]
    dst_notes: list[str | None]  # one per upcoming due time: a DST label or None


class ScheduleList(msgspec.Struct, frozen=True, kw_only=True):
    schedules: list[ScheduleView]
    next_after: str | None = None
    """More follow: ask again with ``after`` set to this deployment ID (a page fits in one
    message, so a list of any length crosses the server's ``max_payload`` in pages)."""


class DueAccount(msgspec.Struct, frozen=True, kw_only=True):
    """One page of a deployment's account of due times (``core/dueaccount.py``).

    ``due_times`` newest first, each with its outcome; ``other_runs``: the Runs of other
    triggers (Run now, Replay) created in the span this page covers, listed beside the due
    times and not counted as any. ``since`` is where the account starts: the one asked, or
    later when the store cannot say more (``notes`` says why). ``next_before``: more due
    times follow; ask again with ``before`` set to it.
    """

    deployment_id: str
    since: datetime
    until: datetime
    due_times: list[DueTime]
    other_runs: list[RunRecord] = []
    next_before: datetime | None = None
    notes: list[str] = []


class RunList(msgspec.Struct, frozen=True, kw_only=True):
    runs: list[RunView]
    next_before: str | None = None


class BulkResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a bulk hold/release did: one page of it when the request named a ``limit``.

    ``changed_count``/``unchanged_count`` count what this answer covers; the lists name the
    deployments, in deployment-ID order. ``next_after``: more Schedules match; ask again
    with ``after`` set to it. A request without ``limit`` (a client older than pages) is
    done whole; its lists stop where the answer would no longer fit in one message
    (``truncated``), the counts still count everything.
    """

    changed: list[str]
    unchanged: list[str]
    changed_count: int | None = None  # None from a service older than the field
    unchanged_count: int | None = None
    next_after: str | None = None
    truncated: bool = False

    @property
    def changed_total(self) -> int:
        return len(self.changed) if self.changed_count is None else self.changed_count

    @property
    def unchanged_total(self) -> int:
        return len(self.unchanged) if self.unchanged_count is None else self.unchanged_count


class LatenessSummary(msgspec.Struct, frozen=True, kw_only=True):
    """Seconds from due time to a stage, over a replica's latest firings (up to 1000)."""

    count: int
    p50: float
    p95: float
    p99: float
    max: float


class ReplicaMetrics(msgspec.Struct, frozen=True, kw_only=True):
    """What one replica counted since it started (docs/operations.md, "Metrics").

    The same figures it exports through OpenTelemetry, for operators without a metrics
    pipeline. Keys: ``trigger`` values for Runs, ``kind`` for store errors, ``state`` for
    Schedules, ``stage`` (``stored``, ``started``) for lateness.
    """

    runs_created: dict[str, int] = {}
    runs_dispatched: dict[str, int] = {}
    runs_failed: dict[str, int] = {}
    dispatch_attempts: int = 0
    dispatch_retries: int = 0
    takeovers: int = 0
    stale_fire_reads: int = 0
    stale_schedule_copies: int = 0
    store_errors: dict[str, int] = {}
    events_skipped: dict[str, int] = {}
    schedules: dict[str, int] = {}
    runs_in_flight: int = 0
    lateness: dict[str, LatenessSummary] = {}
    due_times_skipped: dict[str, int] = {}
    """Due times without a Run by reason (``disabled``, ``held``, ``no_process``, ...)."""
    due_times_unexplained: int = 0
    """Due times without a Run and without a reason: broken promises."""
    auto_holds: int = 0
    """Schedules it held after repeated failures (``ASTRABOX_NATS_AUTO_HOLD_AFTER_FAILURES``)."""
    holds_ended: int = 0
    """Holds with an end it released when the end came."""
    recent_lateness: dict[str, list[float]] = {}
    """Per stage, the lateness (seconds) of its latest firings one by one, oldest first
    (at most 120; empty from replicas older than the field)."""
    schedules_refused: dict[str, int] = {}
    """Schedules its reconcile refused that still stand refused, by kind (``refused``)."""
    foreign: list[str] = []
    """The latest foreign messages its readers skipped (``<subject>#<seq> (<stream>): why``;
    docs/failure-modes.md, "Foreign messages"); empty from replicas older than the field."""


class ReplicaView(msgspec.Struct, frozen=True, kw_only=True):
    identity: str
    started_at: datetime | None = None
    now: datetime | None = None
    """The replica's clock: the store's time as it estimates it (its host clock, corrected:
    docs/architecture.md, "One clock: the store's"); the host clock when it has no estimate."""
    in_flight: list[str] = []
    schedules_planned: int = 0
    metrics: ReplicaMetrics | None = None  # None from replicas older than the field
    in_flight_total: int | None = None
    """How many Runs it holds (``in_flight`` may list only the first: admin/bounded.py);
    None from replicas older than the field, whose list was complete."""

    @property
    def in_flight_count(self) -> int:
        return _count(self.in_flight_total, self.in_flight)
    ready: bool = True
    """False while the replica loads its Schedules after a start (it fires nothing yet;
    docs/operations.md, "Restarts"). Replicas older than the field were ready."""
    server_offset: float | None = None
    """Its host's clock minus the store's (seconds; positive: the host runs ahead), as its
    writes' server timestamps measure it; None with no fresh estimate, or from replicas older
    than the field."""
    server_offset_error: float | None = None
    """How far ``server_offset`` may be off (half the measuring round trip)."""
    refused: list[Refusal] = []
    """The Schedules its reconcile refused, still standing (the first ones, to fit one
    message: admin/bounded.py); empty from replicas older than the field."""
    refused_total: int | None = None
    """How many there are (``refused`` may list only the first)."""

    @property
    def refused_count(self) -> int:
        return _count(self.refused_total, self.refused)
    admin_service: str | None = None
    """What its key in the replicas bucket says: "serving", or why it does not serve the
    admin service (``core/serving.py``); None when it does not say (an older version)."""
    answered: bool = True
    """Whether it answered ``replica.status`` (the figures above are its own); False: known
    only from its key in the replicas bucket (it fires, but serves no admin service)."""


class LeaseView(msgspec.Struct, frozen=True, kw_only=True):
    run_id: str
    holder: str
    expires_at: datetime


class StoreHealth(msgspec.Struct, frozen=True, kw_only=True):
    """The store as the reader found it, and the history retention in force.

    ``retention_days`` and ``retention_runs`` are the limits of the history index stream
    (``<P>_RUNINDEX``: ``max_age`` in days, ``max_msgs_per_subject``), which ARE the
    retention (docs/configuration.md, "History retention"): what the server enforces, not
    what some process's settings say. None when the index could not be read (no provider of
    this version started yet) or sets no such limit.
    """

    reachable: bool
    server_version: str | None = None
    replicas: int | None = None
    leader: str | None = None
    detail: str | None = None
    retention_days: float | None = None
    retention_runs: int | None = None


class ClusterStatus(msgspec.Struct, frozen=True, kw_only=True):
    replicas: list[ReplicaView]
    leases: list[LeaseView]
    in_flight: list[str]
    store: StoreHealth
    leases_total: int | None = None
    """How many live leases there are (``leases`` may list only the first ones, to fit one
    message: admin/bounded.py); None from replicas older than the field (list complete)."""
    in_flight_total: int | None = None
    """How many Runs are in flight (``in_flight`` likewise)."""

    @property
    def lease_count(self) -> int:
        return _count(self.leases_total, self.leases)

    @property
    def in_flight_count(self) -> int:
        return _count(self.in_flight_total, self.in_flight)


class Health(msgspec.Struct, frozen=True, kw_only=True):
    silent_stops: list[str]  # deployment IDs whose expected due time passed without a Run
    stuck_runs: list[RunView]  # PENDING/DISPATCHING past their lease
    failed_runs: list[RunView]  # FAILED in the last 24 h
    skipped_events: list[str] = []  # poison events the answering replica's projections skipped
    silent_stops_total: int | None = None
    """How many silent stops there are (the list may hold only the first ones, to fit one
    message: admin/bounded.py); None from replicas older than the field (list complete)."""
    stuck_runs_total: int | None = None
    failed_runs_total: int | None = None
    server_offset: float | None = None
    """The answering replica's host clock minus the store's (``ReplicaView.server_offset``):
    its health judges due times and leases on the store's clock, corrected by this much."""
    server_offset_error: float | None = None
    busiest_minute: datetime | None = None
    """The minute of the next 24 h in which the most active Schedules are due (UTC), and
    ``busiest_due`` how many (``core/herd.py``); None from replicas older than the field."""
    busiest_due: int = 0
    live_replicas: int | None = None
    """How many replicas the answering one counts live (they share the busiest minute)."""

    @property
    def silent_stop_count(self) -> int:
        return _count(self.silent_stops_total, self.silent_stops)

    @property
    def stuck_run_count(self) -> int:
        return _count(self.stuck_runs_total, self.stuck_runs)

    @property
    def failed_run_count(self) -> int:
        return _count(self.failed_runs_total, self.failed_runs)


def _count(total: int | None, listed: list[Any]) -> int:
    """A list's full length: the count the answer gives, or the list's own length."""
    return len(listed) if total is None else max(total, len(listed))


# ----------------------------------------------------------------------------- backend


class AdminBackend(Protocol):
    """What the console and the CLI need; implemented by ``client.AdminClient``.

    Every method raises :class:`AdminError` on failure. ``events`` yields decoded events
    (``nats_scheduler.core.events``) as they are appended, newest last, optionally filtered.
    ``can_act`` says whether the connected user may request actions (the auditor may not),
    with a reason when not. ``schedule_pages`` yields the Schedule list page by page (each
    page as it arrives: the console shows the first while the rest loads). ``hold_bulk`` and
    ``release_bulk`` with ``limit`` act on one page (``BulkResult.next_after`` continues it);
    without, on every matching Schedule.
    """

    async def list_schedules(self, filter: str | None = None) -> list[ScheduleView]: ...
    async def get_schedule(self, deployment_id: str) -> ScheduleDetail: ...
    async def list_runs(self, deployment_id: str, *, limit: int = 50,
                        before: str | None = None) -> RunList: ...
    async def get_run(self, run_id: str) -> RunView: ...
    async def explain(self, deployment_id: str, *, since: datetime | None = None,
                      until: datetime | None = None, before: datetime | None = None,
                      limit: int = 500) -> DueAccount: ...
    async def hold(self, deployment_id: str, *, by: str, reason: str,
                   until: datetime | None = None) -> ScheduleView: ...
    async def release(self, deployment_id: str, *, by: str, reason: str) -> ScheduleView: ...
    async def hold_bulk(self, filter: str, *, by: str, reason: str,
                        after: str | None = None, limit: int | None = None) -> BulkResult: ...
    async def release_bulk(self, filter: str, *, by: str, reason: str,
                           after: str | None = None, limit: int | None = None
                           ) -> BulkResult: ...
    def schedule_pages(self, filter: str | None = None
                       ) -> AsyncIterator[list[ScheduleView]]: ...
    async def run_now(self, deployment_id: str, *, by: str,
                      reason: str | None = None) -> RunView: ...
    async def replay(self, run_id: str, *, by: str, reason: str | None = None) -> RunView: ...
    async def cluster_status(self) -> ClusterStatus: ...
    async def load_ahead(self, hours: int = 24) -> LoadAhead: ...
    async def health(self) -> Health: ...
    def events(self, *, deployment_id: str | None = None,
               types: set[str] | None = None, history: int = 100) -> AsyncIterator[object]: ...
    async def can_act(self) -> tuple[bool, str | None]: ...

"""The scheduler seam, version 1: the contract between AstraBox and a scheduler provider.

AstraBox's own ``astrabox/seams/scheduler.py`` is not published, so this module carries the
contract with the names AstraBox uses (docs/contract.md explains it). Nothing here knows
about NATS: the docstrings are the contract, and any provider (and the provider-neutral
contract suite in :mod:`nats_scheduler.testing.conformance`) can be written against this
module alone.

Value types are frozen :mod:`msgspec` Structs: immutable, comparable by value, hashable, and
encodable as JSON without a second set of "wire" classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import ClassVar, Literal, Protocol, runtime_checkable

import msgspec

__all__ = [
    "SEAMS_API_VERSION",
    "EnqueueRequest",
    "InvalidSchedule",
    "RepositoryBackend",
    "Run",
    "RunHandler",
    "RunInvocation",
    "RunNotFound",
    "RunPayload",
    "RunPermanentError",
    "RunState",
    "Schedule",
    "ScheduleCapacityExceeded",
    "ScheduleNotFound",
    "SchedulerConfigurationError",
    "SchedulerError",
    "SchedulerProperties",
    "SchedulerProvider",
    "SchedulerUnavailable",
    "Trigger",
]

SEAMS_API_VERSION: int = 1
"""The version of this contract. A provider declares the version it was built against."""


class Trigger(StrEnum):
    """How a Run came to be."""

    SCHEDULE = "schedule"
    """A due time of the cron calendar."""
    RUN_NOW = "run_now"
    """An operator asked for a Run now."""
    REPLAY = "replay"
    """A new Run that re-uses an earlier Run's captured payload."""


class RunState(StrEnum):
    """The provider's dispatch state of a Run."""

    PENDING = "pending"
    """Stored; not yet dispatched, or waiting for a retry."""
    DISPATCHING = "dispatching"
    """A process holds it and is calling the handler."""
    DISPATCHED = "dispatched"
    """``admit_turn`` succeeded; from here on the Session's status is the public one."""
    FAILED = "failed"
    """``RunPermanentError``, or retries ran out."""


# --------------------------------------------------------------------------- errors


class SchedulerError(Exception):
    """Base of every error a provider raises.

    ``str(error)`` is written for an API response: it names the deployment or Run concerned
    and what went wrong in AstraBox's words, never the engine's vocabulary. The engine's own
    exception may be chained as ``__cause__`` for logs.
    """


class SchedulerUnavailable(SchedulerError):
    """The provider's store or engine failed or cannot be reached."""


class InvalidSchedule(SchedulerError, ValueError):
    """A cron expression, time zone or other Schedule field was rejected."""


class ScheduleCapacityExceeded(SchedulerError):
    """Enabling this Schedule would exceed ``max_active_schedules``."""


class SchedulerConfigurationError(SchedulerError):
    """The provider cannot run in this deployment; the message names what is missing."""


class ScheduleNotFound(SchedulerError, LookupError):
    """No Schedule with that deployment ID."""


class RunNotFound(SchedulerError, LookupError):
    """No such Run (in that deployment)."""


class RunPermanentError(Exception):
    """Raised BY THE HANDLER: the call must not be retried; the Run becomes FAILED."""


# --------------------------------------------------------------------------- value types


def _require_aware_utc(value: datetime | None, field: str) -> None:
    """Reject naive datetimes and non-UTC offsets: the seam speaks UTC only."""
    if value is None or value.tzinfo is UTC:
        return
    if value.tzinfo is None or value.utcoffset() != timedelta(0):
        raise ValueError(f"{field} must be a timezone-aware UTC datetime, got {value!r}")


def _require_text(value: object, field: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a string, got {type(value).__name__}")


def _require_id(value: object, field: str) -> None:
    _require_text(value, field)
    assert isinstance(value, str)
    if not value:
        raise ValueError(f"{field} must not be empty")


class RunPayload(msgspec.Struct, frozen=True, gc=False):
    """What AstraBox hands over with a Schedule: the target and the prompt.

    Captured per Run and handed back on every invocation, so editing a Schedule never
    rewrites a Run that already exists. Not tracked by the garbage collector (``gc=False``):
    two strings can make no cycle, and a reconcile's list holds a million of them.
    """

    target: str
    prompt: str

    def __post_init__(self) -> None:
        _require_text(self.target, "target")
        _require_text(self.prompt, "prompt")


class Schedule(msgspec.Struct, frozen=True, gc=False):
    """AstraBox's desired state of one scheduled Deployment.

    ``cron`` has five fields (minute hour day-of-month month day-of-week) with standard cron
    semantics; ``timezone`` is an IANA name. ``version`` is the revision of AstraBox's
    Deployment record so a stale replica cannot undo a newer change: 0 means unversioned
    (apply always replaces, last writer wins); above 0 a stored Schedule is replaced only by
    a higher version, a lower one is ignored and an equal one is a no-op.

    Not tracked by the garbage collector (``gc=False``): its fields (strings, a bool, an int
    and a RunPayload, each checked below) can make no cycle, and AstraBox holds every
    Schedule in the list it reconciles, a million at the largest, which each of Python's
    full collections would otherwise walk (docs/benchmarks.md, "A million Schedules").
    """

    deployment_id: str
    name: str
    cron: str
    timezone: str
    enabled: bool
    payload: RunPayload
    version: int = 0

    def __post_init__(self) -> None:
        _require_id(self.deployment_id, "deployment_id")
        _require_text(self.name, "name")
        _require_text(self.cron, "cron")
        _require_text(self.timezone, "timezone")
        if not isinstance(self.enabled, bool):
            raise TypeError("enabled must be a bool")
        if not isinstance(self.payload, RunPayload):
            raise TypeError("payload must be a RunPayload")
        if isinstance(self.version, bool) or not isinstance(self.version, int):
            raise TypeError("version must be an int")
        if self.version < 0:
            raise ValueError(f"version must be >= 0, got {self.version}")


class RunInvocation(msgspec.Struct, frozen=True):
    """What the provider passes to the handler for one call of a Run.

    ``due_at`` is aware UTC for ``Trigger.SCHEDULE`` and None otherwise. ``attempt`` is 1
    for the first call of a Run and grows by one per retry. ``session_id`` is None for
    ``start_session`` of a Run that has none yet; it is set for ``admit_turn``, and for
    ``start_session`` again after recovery if one was stored.
    """

    run_id: str
    deployment_id: str
    trigger: Trigger
    due_at: datetime | None
    payload: RunPayload
    attempt: int
    session_id: str | None
    replay_of: str | None

    def __post_init__(self) -> None:
        _require_id(self.run_id, "run_id")
        _require_id(self.deployment_id, "deployment_id")
        _require_aware_utc(self.due_at, "due_at")
        if self.attempt < 1:
            raise ValueError(f"attempt must be >= 1, got {self.attempt}")


class Run(msgspec.Struct, frozen=True):
    """One row of the Run ledger. Datetimes are timezone-aware UTC.

    ``error`` is a short provider-neutral reason when FAILED (and the last transient failure
    while PENDING), never engine text.
    """

    run_id: str
    deployment_id: str
    trigger: Trigger
    due_at: datetime | None
    created_at: datetime
    updated_at: datetime
    state: RunState
    payload: RunPayload
    session_id: str | None
    turn_id: str | None
    attempts: int
    error: str | None
    replay_of: str | None
    requested_by: str | None

    def __post_init__(self) -> None:
        _require_id(self.run_id, "run_id")
        _require_id(self.deployment_id, "deployment_id")
        _require_aware_utc(self.due_at, "due_at")
        _require_aware_utc(self.created_at, "created_at")
        _require_aware_utc(self.updated_at, "updated_at")
        if self.attempts < 0:
            raise ValueError(f"attempts must be >= 0, got {self.attempts}")


class EnqueueRequest(msgspec.Struct, frozen=True):
    """A request for a Run outside the calendar: Run now, or Replay of an earlier Run.

    ``trigger`` must be RUN_NOW or REPLAY. ``replay_of`` is required for REPLAY and must name
    a Run of the same deployment. ``request_id`` is an idempotency key: enqueue with a
    request_id already used for that deployment returns the Run it created the first time.
    """

    deployment_id: str
    trigger: Trigger
    replay_of: str | None = None
    request_id: str | None = None
    requested_by: str | None = None

    def __post_init__(self) -> None:
        _require_id(self.deployment_id, "deployment_id")
        if self.trigger == Trigger.SCHEDULE:
            raise ValueError("an enqueued Run must be triggered by run_now or replay, not schedule")
        if self.trigger == Trigger.REPLAY and not self.replay_of:
            raise ValueError("a replay must name the Run it replays (replay_of)")
        if self.trigger == Trigger.RUN_NOW and self.replay_of is not None:
            raise ValueError("replay_of is only allowed for a replay")
        if self.request_id is not None and not self.request_id:
            raise ValueError("request_id must not be empty")


class SchedulerProperties(msgspec.Struct, frozen=True):
    """How this engine legitimately differs from others; AstraBox logs it at startup.

    ``recovery_scope``: "cluster" when any replica resumes a Run a lost process left behind,
    "executor" when only a process restarted with the same identity does.
    ``max_active_schedules``: the most enabled Schedules supported, or None.
    ``pause_visibility_seconds``: how long a disabled Schedule may still fire.
    """

    recovery_scope: Literal["cluster", "executor"]
    max_active_schedules: int | None
    pause_visibility_seconds: float

    def __post_init__(self) -> None:
        if self.recovery_scope not in ("cluster", "executor"):
            raise ValueError(
                f"recovery_scope must be 'cluster' or 'executor', got {self.recovery_scope!r}"
            )
        if self.max_active_schedules is not None and self.max_active_schedules < 1:
            raise ValueError("max_active_schedules must be None or >= 1")
        if self.pause_visibility_seconds < 0:
            raise ValueError("pause_visibility_seconds must be >= 0")

    def __str__(self) -> str:
        cap = "unlimited" if self.max_active_schedules is None else str(self.max_active_schedules)
        return (
            f"recovery_scope={self.recovery_scope} max_active_schedules={cap} "
            f"pause_visibility_seconds={self.pause_visibility_seconds:g}"
        )


# --------------------------------------------------------------------------- protocols


@runtime_checkable
class RunHandler(Protocol):
    """AstraBox's side of dispatch. Both calls are idempotent on ``invocation.run_id``.

    ``RunPermanentError`` means "never retry"; any other exception is transient.
    """

    async def start_session(self, invocation: RunInvocation) -> str:
        """Start (or return the already started) Session of the Run; returns its ID."""
        ...

    async def admit_turn(self, invocation: RunInvocation) -> str:
        """Admit (or return the already admitted) turn; ``invocation.session_id`` is set."""
        ...


@runtime_checkable
class RepositoryBackend(Protocol):
    """What AstraBox passes to ``configure``: the active database backend."""

    name: str
    """"postgresql", "sqlite" or "mongodb"."""

    def sql_database_url(self) -> str:
        """The SQL database URL; raises NotImplementedError on mongodb."""
        ...


@runtime_checkable
class SchedulerProvider(Protocol):
    """A scheduler provider, selected by ``ASTRABOX_SCHEDULER_PROVIDER=<name>``.

    Lifecycle: construct (no arguments) -> ``configure`` -> ``await start(handler)`` ->
    ``await reconcile(every stored Schedule)`` -> any number of apply/delete/enqueue/
    list_runs/get_run -> ``await stop()``. Several replicas run this at once against the
    same store.
    """

    name: ClassVar[str]
    seams_api_version: ClassVar[int]

    @property
    def properties(self) -> SchedulerProperties: ...

    def configure(self, *, repository_backend: RepositoryBackend) -> None:
        """Synchronous, no I/O beyond reading settings; SchedulerConfigurationError if unusable."""
        ...

    async def start(self, handler: RunHandler) -> None:
        """Connect, prepare the store, resume left-behind Runs, begin firing due times."""
        ...

    async def stop(self) -> None:
        """Stop firing, drain in-flight calls within a bounded time; idempotent."""
        ...

    async def reconcile(self, schedules: Sequence[Schedule]) -> None:
        """The full desired state: missing Schedules are deleted, the others applied."""
        ...

    async def apply(self, schedule: Schedule) -> None:
        """Create or replace one Schedule; returns once the change is durable."""
        ...

    async def delete(self, deployment_id: str) -> None:
        """No further scheduled Runs; history stays listable; unknown id is a no-op."""
        ...

    async def enqueue(self, request: EnqueueRequest) -> Run:
        """Store a Run now (RUN_NOW or REPLAY) and return it, PENDING, once durable."""
        ...

    async def list_runs(
        self, deployment_id: str, *, limit: int = 50, before: str | None = None
    ) -> list[Run]:
        """The deployment's Runs of every trigger, newest first, paged by ``before``."""
        ...

    async def get_run(self, run_id: str) -> Run:
        """One Run by ID, or RunNotFound."""
        ...

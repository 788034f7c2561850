"""The events the provider appends to its streams: the only source of truth.

Every event is a frozen msgspec Struct in a tagged union, encoded as JSON so
``nats stream view`` shows it readably. The tag (``"type"``) is an explicit, stable string
such as ``"run.created"``: renaming a class never changes the wire. ``schema`` is the event
schema version; evolution is additive (new fields get defaults, no field changes type,
unknown fields are ignored when decoding), and tests/fixtures/events keeps a sample of every
stored version that tests decode.

Each event also carries the state of its aggregate *after* the event (``run`` or
``schedule``). Readers therefore need only the LAST event of a subject to know a Run or a
Schedule (one direct get, or a consumer with ``DeliverPolicy.LAST_PER_SUBJECT``), while the
full subject history stays the audit trail. Writers compute that state with the pure
functions of :mod:`nats_scheduler.core.runcore` / :mod:`nats_scheduler.core.schedulecore`.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from ..seam import Run, RunState, Schedule

SCHEMA_VERSION = 3
"""1: the first release. 2 (additive): ``run.created`` may carry its creator's claim
(``holder``), the Run then DISPATCHING at attempt 1 from its first event. 3 (additive): an
operator's hold or release names the user the NATS server authenticated (``caller``; ``by``
is then that user), and a name the client only stated is kept apart as ``on_behalf_of``."""


class RunRecord(Run, frozen=True, kw_only=True):
    """The stored state of one Run: the seam's ``Run`` plus dispatch bookkeeping.

    It extends :class:`~nats_scheduler.seam.Run`, so the Run's fields are declared once; the
    admin API's ``RunView`` is this record. The fields below default so a record is built
    from what a command knows; the seam's fields that may be empty default to None here.
    """

    session_id: str | None = None
    turn_id: str | None = None
    attempts: int = 0
    error: str | None = None
    replay_of: str | None = None
    requested_by: str | None = None
    reason: str | None = None
    """Why an operator asked for this Run (Run now / Replay from the console or CLI)."""
    holder: str | None = None
    """The process that claimed the current attempt (while DISPATCHING)."""
    retry_at: datetime | None = None
    """When the next attempt may start (while PENDING after a transient failure)."""
    first_attempt_at: datetime | None = None
    """Start of the first attempt: the retry budget's total time counts from here."""
    index_seq: int | None = None
    """The sequence of the Run's history index entry (written just before ``run.created``):
    where a page that starts after this Run begins, and whether the Run is still retained."""
    on_behalf_of: str | None = None
    """Whom an operator said a Run now or Replay is for (``--by``): stated, never proven;
    ``requested_by`` is the user the server authenticated (schema 3)."""

    @property
    def finished(self) -> bool:
        return self.state in (RunState.DISPATCHED, RunState.FAILED)

    def to_run(self) -> Run:
        """The seam's view of this record (exactly the seam's fields)."""
        return Run(**{name: getattr(self, name) for name in Run.__struct_fields__})

    @classmethod
    def from_run(cls, run: Run) -> RunRecord:
        """A record of a seam ``Run`` (no bookkeeping known)."""
        return cls(**{name: getattr(run, name) for name in Run.__struct_fields__})


class Caller(msgspec.Struct, frozen=True, kw_only=True):
    """Who sent an operator's request, as the NATS server authenticated the connection.

    The server writes it into the request's ``Nats-Request-Info`` header when the request
    crosses into the admin service's account (a service import with ``share: true``), over
    any value the client sent: so it is proof, where a name in the request is only a claim.
    """

    user: str
    """The user the connection logged in as (a user name, an NKey or a JWT's public key)."""
    account: str
    """The account that user belongs to."""


class Hold(msgspec.Struct, frozen=True, kw_only=True):
    """An operator hold: who paused the Schedule, when and why.

    ``by`` is the authenticated user when ``caller`` is set (schema 3), else the name the
    client gave; ``on_behalf_of`` is a name the operator stated (``--by``), never proven.
    """

    by: str
    reason: str
    at: datetime
    caller: Caller | None = None
    on_behalf_of: str | None = None


class ScheduleRecord(Schedule, frozen=True, kw_only=True, gc=False):
    """The stored state of one Schedule: AstraBox's definition plus the operator hold.

    It extends :class:`~nats_scheduler.seam.Schedule`, so the definition's fields are
    declared once; the admin API's ``ScheduleView`` extends this record in turn.

    ``gc=False``: a replica holds one per Schedule, a million on a large platform, and the
    garbage collector walked every one of them in each full collection. A record holds
    texts, numbers, a time and frozen structs of the same kind, so it can never be part of
    a reference cycle, which is all the collector is for.
    """

    deleted: bool = False
    hold: Hold | None = None
    updated_at: datetime

    @property
    def active(self) -> bool:
        """Whether the calendar fires: enabled, not held, not deleted."""
        return self.enabled and not self.deleted and self.hold is None

    def definition(self) -> Schedule:
        """AstraBox's Schedule as last applied."""
        return Schedule(**{name: getattr(self, name) for name in Schedule.__struct_fields__})

    @classmethod
    def of(cls, schedule: Schedule, *, updated_at: datetime, hold: Hold | None = None,
           deleted: bool = False) -> ScheduleRecord:
        """A record of AstraBox's ``schedule`` as of ``updated_at``."""
        definition = {name: getattr(schedule, name) for name in Schedule.__struct_fields__}
        return cls(**definition, deleted=deleted, hold=hold, updated_at=updated_at)


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Common envelope: schema version, when, and which process (or operator) wrote it."""

    schema: int = SCHEMA_VERSION
    at: datetime
    actor: str


# ----------------------------------------------------------------------------- Run events


class RunEvent(Event, frozen=True, kw_only=True):
    run: RunRecord


class RunCreated(RunEvent, frozen=True, kw_only=True, tag="run.created"):
    """A Run was stored (a due time fired, or Run now / Replay was requested). PENDING.

    Since schema 2 a create may carry its creator's claim: ``holder`` is then the process
    that opened the Run's key (its lease) before storing it, and the Run is DISPATCHING at
    attempt 1, as after a ``run.claimed`` (one write fewer per Run; docs/architecture.md,
    "Firing at scale"). Without ``holder`` it is PENDING, as every version-1 create.
    """

    holder: str | None = None


class RunClaimed(RunEvent, frozen=True, kw_only=True, tag="run.claimed"):
    """A process holds the Run's lease and starts attempt ``run.attempts``. DISPATCHING."""

    holder: str
    takeover_from: str | None = None


class RunSessionStarted(RunEvent, frozen=True, kw_only=True, tag="run.session_started"):
    """``start_session`` returned; the Session ID is stored before ``admit_turn``."""

    session_id: str


class RunAttemptFailed(RunEvent, frozen=True, kw_only=True, tag="run.attempt_failed"):
    """A transient failure; the Run waits for ``retry_at``. PENDING."""

    error: str
    retry_at: datetime


class RunDispatched(RunEvent, frozen=True, kw_only=True, tag="run.dispatched"):
    """``admit_turn`` returned; the turn is stored. DISPATCHED (final)."""

    turn_id: str


class RunFailed(RunEvent, frozen=True, kw_only=True, tag="run.failed"):
    """``RunPermanentError`` or the retry budget ran out. FAILED (final)."""

    error: str


class RunReleased(RunEvent, frozen=True, kw_only=True, tag="run.released"):
    """The holder gave the Run back unfinished (drain at stop). PENDING."""

    reason: str


RunEventType = (
    RunCreated | RunClaimed | RunSessionStarted | RunAttemptFailed | RunDispatched | RunFailed
    | RunReleased
)

# ------------------------------------------------------------------------ Schedule events


class ScheduleEvent(Event, frozen=True, kw_only=True, gc=False):
    """A change of one Schedule, carrying its record after the change. Without
    garbage-collector bookkeeping, as its record (a first reconcile holds a million)."""

    schedule: ScheduleRecord


class ScheduleApplied(ScheduleEvent, frozen=True, kw_only=True, tag="schedule.applied"):
    """AstraBox created or replaced the Schedule's definition (``apply``/``reconcile``)."""


class ScheduleDeleted(ScheduleEvent, frozen=True, kw_only=True, tag="schedule.deleted"):
    """AstraBox deleted the Schedule; its Runs stay in the ledger."""


class OperatorChange(ScheduleEvent, frozen=True, kw_only=True):
    """An operator's hold or release: who (``by``; proven when ``caller`` is set), why, and
    whom the operator said they acted for (``on_behalf_of``, stated, never proven)."""

    by: str
    reason: str
    caller: Caller | None = None
    on_behalf_of: str | None = None


class ScheduleHeld(OperatorChange, frozen=True, kw_only=True, tag="schedule.held"):
    """An operator paused the Schedule (not cleared by apply/reconcile)."""


class ScheduleReleased(OperatorChange, frozen=True, kw_only=True, tag="schedule.released"):
    """An operator lifted the hold."""


ScheduleEventType = ScheduleApplied | ScheduleDeleted | ScheduleHeld | ScheduleReleased

AnyEvent = RunEventType | ScheduleEventType

_encoder = msgspec.json.Encoder()
_run_decoder = msgspec.json.Decoder(RunEventType)
_schedule_decoder = msgspec.json.Decoder(ScheduleEventType)
_any_decoder = msgspec.json.Decoder(AnyEvent)


def encode(event: AnyEvent) -> bytes:
    """JSON bytes of an event."""
    return _encoder.encode(event)


def decode_run_event(data: bytes) -> RunEventType:
    return _run_decoder.decode(data)


def decode_schedule_event(data: bytes) -> ScheduleEventType:
    return _schedule_decoder.decode(data)


def decode_event(data: bytes) -> AnyEvent:
    return _any_decoder.decode(data)


def to_builtins(event: AnyEvent) -> dict[str, object]:
    """The event as plain JSON-compatible builtins (for ``--json`` output and the console)."""
    result = msgspec.to_builtins(event)
    assert isinstance(result, dict)
    return result

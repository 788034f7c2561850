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

SCHEMA_VERSION = 4
"""1: the first release. 2 (additive): ``run.created`` may carry its creator's claim
(``holder``), the Run then DISPATCHING at attempt 1 from its first event. 3 (additive): an
operator's hold or release names the user the NATS server authenticated (``caller``; ``by``
is then that user), and a name the client only stated is kept apart as ``on_behalf_of``;
a new event, ``outage.recorded`` (a span in which no provider process ran).
4 (additive): a hold may end by itself (``until``), the scheduler holds and releases on its
own (``by`` is :data:`SYSTEM`: a hold that ended, repeated failures), and a Run records when
the ``start_session`` call that gave it its Session began (``started_at``)."""

SYSTEM = "system"
"""``by`` of the holds and releases the scheduler writes itself (``caller`` is then None):
the release of a hold whose end came, the hold after repeated failures."""


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
    started_at: datetime | None = None
    """When the ``start_session`` call that returned the Session began, on the dispatching
    process's clock (schema 4): its due time to this is the Run's start lateness. Not part
    of the state :func:`~nats_scheduler.core.runcore.evolve` verifies: a writer of an
    earlier release carries no such field and drops it."""

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
    until: datetime | None = None
    """When the hold lifts itself, on the store's clock (schema 4): a due time at or after
    it fires, whether or not the release (by :data:`SYSTEM`) is stored yet. None: until an
    operator releases it."""

    def ended(self, instant: datetime) -> bool:
        """Whether this hold had lifted itself by ``instant`` (it has an end, and it came)."""
        return self.until is not None and self.until <= instant


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

    @property
    def resumes_at(self) -> datetime | None:
        """When a hold with an end lifts itself, for a Schedule that fires but for it."""
        hold = self.hold
        if hold is None or hold.until is None or not self.enabled or self.deleted:
            return None
        return hold.until

    def fires_at(self, instant: datetime) -> bool:
        """Whether a due time at ``instant`` fires: :attr:`active`, or held by a hold whose
        end came by then (the firing path's test: the release may not be stored yet)."""
        if self.active:
            return True
        resumes = self.resumes_at
        return resumes is not None and resumes <= instant

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
    whom the operator said they acted for (``on_behalf_of``, stated, never proven).

    The scheduler's own (schema 4) have ``by`` :data:`SYSTEM` and no ``caller``.
    """

    by: str
    reason: str
    caller: Caller | None = None
    on_behalf_of: str | None = None
    until: datetime | None = None
    """On a hold: when it lifts itself. On a release by :data:`SYSTEM`: the end that came."""


class ScheduleHeld(OperatorChange, frozen=True, kw_only=True, tag="schedule.held"):
    """An operator paused the Schedule (not cleared by apply/reconcile), or the scheduler
    did after repeated failures (``by`` :data:`SYSTEM`)."""


class ScheduleReleased(OperatorChange, frozen=True, kw_only=True, tag="schedule.released"):
    """An operator lifted the hold, or (``by`` :data:`SYSTEM`, the hold's reason and
    ``until``) the hold's end came."""


ScheduleEventType = ScheduleApplied | ScheduleDeleted | ScheduleHeld | ScheduleReleased

# ------------------------------------------------------------------------ outage events


class OutageRecorded(Event, frozen=True, kw_only=True, tag="outage.recorded"):
    """No provider process ran from ``start`` to ``end`` (schema 3).

    Appended once per outage by the first replica to start after it (``actor``): ``end`` is
    that replica's start, ``start`` the last instant a process provably ran (the newest
    server timestamp of anything a process stored), and ``evidence`` names that write. Due
    times in between were skipped by the rules (no backfill); the account of due times
    (``core/dueaccount.py``) reads them as ``no_process``. Times are the store's clock.
    """

    start: datetime
    end: datetime
    evidence: str = ""


OutageEventType = OutageRecorded

AnyEvent = RunEventType | ScheduleEventType | OutageEventType

_encoder = msgspec.json.Encoder()
_run_decoder = msgspec.json.Decoder(RunEventType)
_schedule_decoder = msgspec.json.Decoder(ScheduleEventType)
_outage_decoder = msgspec.json.Decoder(OutageEventType)
_any_decoder = msgspec.json.Decoder(AnyEvent)


def encode(event: AnyEvent) -> bytes:
    """JSON bytes of an event."""
    return _encoder.encode(event)


def decode_run_event(data: bytes) -> RunEventType:
    return _run_decoder.decode(data)


def decode_schedule_event(data: bytes) -> ScheduleEventType:
    return _schedule_decoder.decode(data)


def decode_outage_event(data: bytes) -> OutageEventType:
    return _outage_decoder.decode(data)


def decode_event(data: bytes) -> AnyEvent:
    return _any_decoder.decode(data)


def to_builtins(event: AnyEvent) -> dict[str, object]:
    """The event as plain JSON-compatible builtins (for ``--json`` output and the console)."""
    result = msgspec.to_builtins(event)
    assert isinstance(result, dict)
    return result

"""The functional core of a Run: commands return events; ``evolve`` checks a history.

No I/O here. The dispatcher decides what happens next with these functions and the store
appends the event they return. Every event carries the Run's whole state after it, so
readers (the ledger projection, the admin views) take that state as given and never fold.
:func:`evolve` is for whoever must verify a history rather than trust it: it replays each
event's command on the state before it and rejects an event whose state does not follow
(``tests/test_runcore.py``). Every function takes the current record and ``now``
explicitly, so tests run them without a server or a clock.

Life of a Run (docs/architecture.md has the diagram)::

    created -> claimed -> [session_started] -> dispatched
                  |  \\-> attempt_failed -> claimed ... (retries, bounded)
                  |  \\-> failed
                  \\-> released -> claimed (after a drain)

A scheduled Run's creator that holds its key stores ``created`` with its claim in it
(``holder``, schema 2): the Run starts at ``claimed``'s state, one write fewer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

import msgspec

from ..seam import RunInvocation, RunPayload, RunState, Trigger
from .events import (
    RunAttemptFailed,
    RunClaimed,
    RunCreated,
    RunDispatched,
    RunEventType,
    RunFailed,
    RunRecord,
    RunReleased,
    RunSessionStarted,
)


class TransitionError(Exception):
    """An event that cannot follow the Run's current state (a version gap or a bug)."""


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with full jitter.

    ``attempts`` caps the number of handler attempts; ``total`` (seconds, optional) caps the
    time from the first attempt. ``rng`` is injectable so tests can pin the jitter.
    """

    attempts: int = 8
    initial: float = 1.0
    cap: float = 60.0
    total: float | None = None

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        ceiling = min(self.cap, self.initial * (2 ** (attempt - 1)))
        # Full jitter in [ceiling/2, ceiling]: spreads retries of many Runs that failed
        # together, but never retries sooner than half the nominal backoff.
        r = (rng or random).random()
        return ceiling * (0.5 + 0.5 * r)

    def exhausted(self, record: RunRecord, now: datetime, next_delay: float) -> bool:
        """Whether no further attempt is allowed after the current one failed."""
        if record.attempts >= self.attempts:
            return True
        if self.total is not None and record.first_attempt_at is not None:
            deadline = record.first_attempt_at + timedelta(seconds=self.total)
            return now + timedelta(seconds=next_delay) > deadline
        return False


def _require(record: RunRecord, *states: RunState) -> None:
    if record.state not in states:
        allowed = ", ".join(s.value for s in states)
        raise TransitionError(f"run {record.run_id} is {record.state.value}, expected {allowed}")


def create(
    *,
    run_id: str,
    deployment_id: str,
    trigger: Trigger,
    due_at: datetime | None,
    payload: RunPayload,
    now: datetime,
    actor: str,
    replay_of: str | None = None,
    requested_by: str | None = None,
    reason: str | None = None,
    holder: str | None = None,
    on_behalf_of: str | None = None,
) -> RunCreated:
    """A new PENDING Run; with ``holder``, one already claimed by it (DISPATCHING, attempt 1).

    ``holder`` is for a creator that holds the Run's lease when it stores the Run (it opened
    the Run's key first): its create is its claim, so no ``run.claimed`` follows.
    """
    record = RunRecord(
        run_id=run_id,
        deployment_id=deployment_id,
        trigger=trigger,
        due_at=due_at,
        created_at=now,
        updated_at=now,
        state=RunState.PENDING,
        payload=payload,
        replay_of=replay_of,
        requested_by=requested_by,
        reason=reason,
        on_behalf_of=on_behalf_of,
    )
    if holder is not None:
        record = msgspec.structs.replace(
            record, state=RunState.DISPATCHING, holder=holder, attempts=1,
            first_attempt_at=now)
    return RunCreated(at=now, actor=actor, run=record, holder=holder)


def claimed_at_create(record: RunRecord) -> bool:
    """Whether ``record`` is a Run stored already claimed and not touched since.

    Such a Run's first attempt has begun on paper only: the gate before a first start
    (runtime/firing.py) still applies to it, as to a PENDING Run never claimed.
    """
    return (record.attempts == 1 and record.state == RunState.DISPATCHING
            and record.session_id is None and record.updated_at == record.created_at
            and record.first_attempt_at == record.created_at)


def indexed(event: RunCreated, index_seq: int | None,
            created_at: datetime | None = None) -> RunCreated:
    """The create with the Run's history index entry recorded on it: the entry's sequence,
    and the entry's ``created_at`` as the Run's own (the key the history lists it by: a
    Run and its entry never disagree on it). The create is stamped at that instant
    throughout (``at``, ``updated_at``, a claim's ``first_attempt_at``), as if built then."""
    if index_seq is None:
        return event
    run = msgspec.structs.replace(event.run, index_seq=index_seq)
    if created_at is None or created_at == run.created_at:
        return msgspec.structs.replace(event, run=run)
    run = msgspec.structs.replace(
        run, created_at=created_at, updated_at=created_at,
        first_attempt_at=None if run.first_attempt_at is None else created_at)
    return msgspec.structs.replace(event, at=created_at, run=run)


def claim(record: RunRecord, *, holder: str, now: datetime) -> RunClaimed:
    """Start the next attempt under ``holder``'s lease.

    Allowed from PENDING, and from DISPATCHING when the previous holder's lease was lost
    (a takeover: same Run ID, same stored Session ID).
    """
    _require(record, RunState.PENDING, RunState.DISPATCHING)
    takeover = record.holder if record.state == RunState.DISPATCHING else None
    new = msgspec.structs.replace(
        record,
        state=RunState.DISPATCHING,
        holder=holder,
        attempts=record.attempts + 1,
        retry_at=None,
        updated_at=now,
        first_attempt_at=record.first_attempt_at or now,
    )
    return RunClaimed(at=now, actor=holder, run=new, holder=holder, takeover_from=takeover)


def session_started(
    record: RunRecord, *, session_id: str, now: datetime, actor: str,
    started_at: datetime | None = None,
) -> RunSessionStarted:
    """``start_session`` returned ``session_id``; ``started_at``: when that call began (the
    Run's start, for its lateness; kept once set)."""
    _require(record, RunState.DISPATCHING)
    new = msgspec.structs.replace(record, session_id=session_id, updated_at=now,
                                  started_at=record.started_at or started_at)
    return RunSessionStarted(at=now, actor=actor, run=new, session_id=session_id)


def dispatched(record: RunRecord, *, turn_id: str, now: datetime, actor: str) -> RunDispatched:
    _require(record, RunState.DISPATCHING)
    new = msgspec.structs.replace(
        record, state=RunState.DISPATCHED, turn_id=turn_id, holder=None, error=None,
        updated_at=now,
    )
    return RunDispatched(at=now, actor=actor, run=new, turn_id=turn_id)


def attempt_failed(
    record: RunRecord, *, error: str, retry_at: datetime, now: datetime, actor: str
) -> RunAttemptFailed:
    _require(record, RunState.DISPATCHING)
    new = msgspec.structs.replace(
        record, state=RunState.PENDING, error=error, retry_at=retry_at, updated_at=now,
    )
    return RunAttemptFailed(at=now, actor=actor, run=new, error=error, retry_at=retry_at)


def failed(record: RunRecord, *, error: str, now: datetime, actor: str) -> RunFailed:
    _require(record, RunState.DISPATCHING, RunState.PENDING)
    new = msgspec.structs.replace(
        record, state=RunState.FAILED, error=error, holder=None, retry_at=None, updated_at=now,
    )
    return RunFailed(at=now, actor=actor, run=new, error=error)


def released(record: RunRecord, *, reason: str, now: datetime, actor: str) -> RunReleased:
    _require(record, RunState.DISPATCHING, RunState.PENDING)
    new = msgspec.structs.replace(record, state=RunState.PENDING, holder=None, updated_at=now)
    return RunReleased(at=now, actor=actor, run=new, reason=reason)


def evolve(record: RunRecord | None, event: RunEventType) -> RunRecord:
    """Check one event against the Run's state before it; return the state after it.

    The event carries the state after it; ``evolve`` checks that this state is what the
    command for that event type would have produced from ``record``, so a forged or
    out-of-order event raises :class:`TransitionError`. Projections do not call this: they
    trust the stored state (the single-writer rule already ordered the events).
    """
    if isinstance(event, RunCreated):
        if record is not None:
            raise TransitionError(f"run {event.run.run_id} already exists")
        claimed = event.run.state == RunState.DISPATCHING
        if (event.holder is not None) != claimed or (
                claimed and (event.run.holder != event.holder or event.run.attempts != 1)):
            raise TransitionError(f"run {event.run.run_id}: created in a state that does "
                                  "not follow from its claim")
        return event.run
    if record is None:
        raise TransitionError(f"run {event.run.run_id}: {type(event).__name__} before created")
    if event.run.run_id != record.run_id:
        raise TransitionError("event of another run")
    # started_at is a measure, not a state: taken as the writer gives it (one of an earlier
    # release leaves it out), so a mixed-release history still verifies
    expected = msgspec.structs.replace(_replay(record, event), started_at=event.run.started_at)
    if expected != event.run:
        raise TransitionError(f"run {record.run_id}: event state does not follow from the Run")
    return event.run


def _replay(record: RunRecord, event: RunEventType) -> RunRecord:
    at, actor = event.at, event.actor
    if isinstance(event, RunClaimed):
        return claim(record, holder=event.holder, now=at).run
    if isinstance(event, RunSessionStarted):
        return session_started(record, session_id=event.session_id, now=at, actor=actor).run
    if isinstance(event, RunDispatched):
        return dispatched(record, turn_id=event.turn_id, now=at, actor=actor).run
    if isinstance(event, RunAttemptFailed):
        return attempt_failed(record, error=event.error, retry_at=event.retry_at, now=at,
                              actor=actor).run
    if isinstance(event, RunFailed):
        return failed(record, error=event.error, now=at, actor=actor).run
    if isinstance(event, RunReleased):
        return released(record, reason=event.reason, now=at, actor=actor).run
    raise TransitionError(f"unknown event {type(event).__name__}")


_INVOCATION_FIELDS = tuple(f for f in RunInvocation.__struct_fields__ if f != "attempt")


def invocation(record: RunRecord) -> RunInvocation:
    """What the handler receives for the current attempt of ``record``.

    Every field but ``attempt`` is the Run's own (same names); ``attempt`` counts from 1.
    """
    fields = {name: getattr(record, name) for name in _INVOCATION_FIELDS}
    return RunInvocation(**fields, attempt=max(record.attempts, 1))


def describe_failure(exc: BaseException, *, timed_out: bool = False) -> str:
    """A short, provider-neutral reason for a handler failure (never engine text)."""
    if timed_out:
        return "the handler did not answer within the call timeout"
    name = type(exc).__name__
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    return f"handler call failed ({name}): {text}" if text else f"handler call failed ({name})"

"""The functional core of a Schedule: decide what an apply, delete, hold or release writes.

Each ``decide_*`` function takes the stored record (or None) and returns the event to append,
or None when nothing must be written (the change is stale, equal or a no-op). The store then
appends that event conditionally on the subject's last sequence, so a concurrent writer makes
the append fail and the decision is taken again on fresh state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from datetime import datetime
from typing import NamedTuple, Protocol, Required, TypedDict, Unpack

import msgspec

from ..seam import InvalidSchedule, Schedule, ScheduleCapacityExceeded
from .events import (
    SYSTEM,
    Caller,
    Hold,
    RunRecord,
    ScheduleApplied,
    ScheduleDeleted,
    ScheduleHeld,
    ScheduleRecord,
    ScheduleReleased,
)
from .refusals import Refusal, RefusalKind, duplicates, refusal, repeated
from .validation import ScheduleTooLarge

_DEFINITION = Schedule.__struct_fields__


def _definition_equal(record: ScheduleRecord, schedule: Schedule) -> bool:
    """``record.definition() == schedule``, field by field without building a Schedule (a
    reconcile compares every stored Schedule: building and validating each one doubled it)."""
    if record.deleted:
        return False
    if type(schedule) is not Schedule or _DEFINITION != _COMPARED:
        return record.definition() == schedule  # a subclass: compared whole, type included
    # Spelled out, not a loop over the fields by name: a million-Schedule reconcile spent
    # most of its comparison in getattr and the generator.
    return (record.deployment_id == schedule.deployment_id and record.cron == schedule.cron
            and record.timezone == schedule.timezone and record.enabled == schedule.enabled
            and record.version == schedule.version and record.name == schedule.name
            and record.payload == schedule.payload)


def unchanged(current: ScheduleRecord | None, schedule: Schedule) -> bool:
    """Whether ``schedule`` is the live stored definition (checked when it was stored)."""
    return current is not None and _definition_equal(current, schedule)


_COMPARED = ("deployment_id", "name", "cron", "timezone", "enabled", "payload", "version")
"""The fields :func:`_definition_equal` spells out: if the seam's Schedule ever gains one,
the comparison falls back to the whole definition rather than missing it."""


def decide_apply(
    current: ScheduleRecord | None, schedule: Schedule, *, now: datetime, actor: str
) -> ScheduleApplied | None:
    """Create or replace, honouring version ordering (``Schedule.version``, docs/contract.md).

    Version 0 always replaces (last writer wins). Above 0, only a higher version replaces a
    stored one; lower is ignored and equal is a no-op. An identical definition writes nothing.
    An operator hold survives apply: only ``release`` clears it.
    """
    if current is not None:
        if _definition_equal(current, schedule):
            return None
        if schedule.version > 0 and current.version > 0 and schedule.version <= current.version:
            return None
    hold = None if current is None or current.deleted else current.hold
    record = ScheduleRecord.of(schedule, updated_at=now, hold=hold)
    return ScheduleApplied(at=now, actor=actor, schedule=record)


def decide_delete(
    current: ScheduleRecord | None, *, now: datetime, actor: str
) -> ScheduleDeleted | None:
    """Mark deleted; deleting an unknown or already deleted Schedule writes nothing."""
    if current is None or current.deleted:
        return None
    record = msgspec.structs.replace(current, deleted=True, hold=None, updated_at=now)
    return ScheduleDeleted(at=now, actor=actor, schedule=record)


class OperatorNotes(TypedDict, total=False):
    """Who asked for a hold or release and why (the keywords of :func:`decide_hold`).

    ``caller`` is the user the server authenticated for the request (the admin service
    knows it); with it ``by`` is that user. ``on_behalf_of`` is a name the operator only
    stated (``--by``), stored apart and never as who acted.
    """

    by: Required[str]
    reason: Required[str]
    caller: Caller | None
    on_behalf_of: str | None
    until: datetime | None
    """A hold only: when it lifts itself (``Hold.until``); None, until released."""


def decide_hold(current: ScheduleRecord, *, now: datetime, actor: str,
                **notes: Unpack[OperatorNotes]) -> ScheduleHeld | None:
    """Put an operator hold on the Schedule; holding a held Schedule writes nothing (a held
    Schedule keeps its hold, and its end: release it and hold it again to change them)."""
    if current.hold is not None:
        return None
    caller, on_behalf_of = notes.get("caller"), notes.get("on_behalf_of")
    by, reason = caller.user if caller is not None else notes["by"], notes["reason"]
    until = notes.get("until")
    hold = Hold(by=by, reason=reason, at=now, caller=caller, on_behalf_of=on_behalf_of,
                until=until)
    record = msgspec.structs.replace(current, hold=hold, updated_at=now)
    return ScheduleHeld(at=now, actor=actor, schedule=record, by=by, reason=reason,
                        caller=caller, on_behalf_of=on_behalf_of, until=until)


def decide_release(current: ScheduleRecord, *, now: datetime, actor: str,
                   **notes: Unpack[OperatorNotes]) -> ScheduleReleased | None:
    """Lift the operator hold; releasing an unheld Schedule writes nothing."""
    if current.hold is None:
        return None
    caller, on_behalf_of = notes.get("caller"), notes.get("on_behalf_of")
    by = caller.user if caller is not None else notes["by"]
    record = msgspec.structs.replace(current, hold=None, updated_at=now)
    return ScheduleReleased(at=now, actor=actor, schedule=record, by=by,
                            reason=notes["reason"], caller=caller, on_behalf_of=on_behalf_of)


def decide_hold_end(current: ScheduleRecord | None, *, now: datetime, actor: str
                    ) -> ScheduleReleased | None:
    """The release of a hold whose end has come, by :data:`SYSTEM` with the hold's reason.

    Nothing when the stored Schedule has no such hold by ``now``: released meanwhile, held
    again with a later end, deleted. Decided on the stored state like every change, so of
    the replicas that try at the end, one writes it.
    """
    if current is None or current.deleted or current.hold is None:
        return None
    hold = current.hold
    if not hold.ended(now):
        return None
    record = msgspec.structs.replace(current, hold=None, updated_at=now)
    return ScheduleReleased(at=now, actor=actor, schedule=record, by=SYSTEM,
                            reason=hold.reason, until=hold.until)


AUTO_HOLD_RUNS_NAMED = 10
"""Run IDs an automatic hold's reason names at most (the newest): a reason is a note of at
most 1,000 characters (core/validation.py)."""


def decide_auto_hold(current: ScheduleRecord | None, failed: Sequence[RunRecord], *,
                     now: datetime, actor: str) -> ScheduleHeld | None:
    """The scheduler's own hold after ``failed``, scheduled Runs that ended FAILED in a row
    (oldest first), naming the last error and the Runs.

    Nothing when the stored Schedule does not fire (deleted, disabled, held already), or
    changed after the first of those Runs was created (an operator released it, AstraBox
    applied a new definition): the count starts again at every change, and this decision,
    on the stored state, is what keeps a release made a moment ago from being undone.
    """
    if current is None or not current.active or not failed:
        return None
    if any(run.created_at < current.updated_at for run in failed):
        return None
    named = [run.run_id for run in failed[-AUTO_HOLD_RUNS_NAMED:]]
    more = len(failed) - len(named)
    runs = ", ".join(named) + (f" and {more} earlier" if more else "")
    error = (failed[-1].error or "no reason given")[:300]
    reason = (f"{len(failed)} scheduled Runs in a row ended failed; last error: {error}; "
              f"Runs: {runs}")
    hold = Hold(by=SYSTEM, reason=reason, at=now)
    record = msgspec.structs.replace(current, hold=hold, updated_at=now)
    return ScheduleHeld(at=now, actor=actor, schedule=record, by=SYSTEM, reason=reason)


OperatorDecision = Callable[..., ScheduleHeld | ScheduleReleased | None]
""":func:`decide_hold` or :func:`decide_release`."""


def check_capacity(
    deployment_id: str, current: ScheduleRecord | None, enabled_elsewhere: int, cap: int
) -> None:
    """ScheduleCapacityExceeded when enabling ``deployment_id`` would pass ``cap``.

    A Schedule already enabled (and not deleted) never counts twice: re-applying it is
    always allowed. ``enabled_elsewhere`` counts the other enabled Schedules.
    """
    if current is not None and current.enabled and not current.deleted:
        return
    if enabled_elsewhere + 1 > cap:
        raise ScheduleCapacityExceeded(capacity_reason(deployment_id, cap))


def capacity_reason(deployment_id: str, cap: int) -> str:
    """Why enabling ``deployment_id`` is refused at the capacity ``cap``."""
    return (f"cannot enable deployment {deployment_id!r}: the scheduler supports at most "
            f"{cap} enabled schedules")


Known = Callable[[str], "tuple[int, ScheduleRecord] | None"]
"""A deployment's Schedule as the table holds it, with the sequence of its last event."""


class KnownEntry(Protocol):
    """A deployment's Schedule as the table holds it (``ScheduleTable.entry``)."""

    @property
    def seq(self) -> int: ...

    @property
    def record(self) -> ScheduleRecord: ...


class PlannedWrite(msgspec.Struct, frozen=True, gc=False):
    """One change a reconcile stores: decided on the table's copy at ``seq`` (0: none).
    A first reconcile plans a million: the garbage collector need not walk them."""

    deployment_id: str
    seq: int
    event: ScheduleApplied | ScheduleDeleted


class ReconcilePlan(NamedTuple):
    """What a reconcile stores (deletions first, then changes in the list's order) and the
    Schedules it refuses, each kept as stored (docs/contract.md, "When reconcile refuses
    Schedules")."""

    writes: list[PlannedWrite]
    refused: list[Refusal]


def plan_reconcile(
    schedules: Sequence[Schedule], known: Known, live: Iterable[ScheduleRecord], *,
    enabled: int, cap: int, now: datetime, actor: str, given: AbstractSet[str] | None = None,
    check: Callable[[Schedule], None] | None = None,
    entry: Callable[[str], KnownEntry | None] | None = None, live_count: int | None = None,
    ordered: Iterable[KnownEntry] | None = None,
    unique: Callable[[Sequence[Schedule]], AbstractSet[str]] | None = None,
) -> ReconcilePlan:
    """What ``reconcile(schedules)`` writes and refuses, decided in one pass on a table
    proven current.

    Every Schedule decided as ``apply`` decides it (:func:`decide_apply`), every live
    Schedule not given deleted (:func:`decide_delete`); unchanged Schedules plan nothing.
    A Schedule is refused on its own, never the list: ``check`` raises InvalidSchedule
    (``ScheduleTooLarge``: ``too_large``), a deployment given twice is refused whole (none
    of its definitions applied), and past the capacity the new enables are refused from
    the end of the list: the Schedules stored enabled that stay enabled keep their place,
    then the others in the list's order (the capacity counts the enabled Schedules once
    the deletions and disables of this list are made). The same list on the same table
    refuses the same Schedules on every replica. A refused Schedule plans nothing: its
    stored record stays, and it is not deleted. ``enabled``: the table's enabled Schedules.
    ``given``: the deployment IDs of ``schedules``, when the caller has them already.
    ``check``: called for every Schedule but those equal to their stored definition, which
    was checked when it was stored (a restart's reconcile of a million unchanged Schedules
    validated each again: a second of its ten).
    ``entry``: ``known`` without building a tuple per Schedule (the table's own entry).
    ``live_count``: how many Schedules ``live`` holds; when every one of them is among
    ``schedules`` (as many given Schedules found live, the deployments given once each),
    ``live`` is not walked: nothing to delete.
    ``ordered``: the table's entries in the table's own order. A list given in that order
    (AstraBox listing its Schedules the same way at every start) is matched by walking both
    side by side: no hash lookup per Schedule, and its deployments are distinct because the
    table's are, so no set of a million IDs is built either. A Schedule out of that order is
    looked up as without it; deleted entries the list does not give are stepped over.
    ``unique``: the set of the deployment IDs of ``schedules``; called after the pass unless
    ``given`` was passed or the walk matched every Schedule in order. (Hash lookups of a
    million strings are what grows faster than the Schedules once they outgrow the
    machine's caches: docs/benchmarks.md.)
    """
    decided = _decide(schedules, known, now=now, actor=actor, check=check, entry=entry,
                      ordered=ordered)
    wanted: AbstractSet[str] | None = given
    if wanted is None and decided.in_order != len(schedules):  # not proven distinct by the walk
        wanted = (unique(schedules) if unique is not None
                  else {s.deployment_id for s in schedules})
    refused: list[Refusal] = []
    distinct = wanted is None or len(wanted) == len(schedules)
    if not distinct:  # rare: decided again without the deployments given twice
        twice = repeated(schedules)
        refused = duplicates(schedules, twice, at=now)
        decided = _decide([s for s in schedules if s.deployment_id not in twice], known,
                          now=now, actor=actor, check=check, entry=entry, ordered=None)
    refused[:0] = decided.refused
    deletions: list[PlannedWrite] = []
    if not (live_count is not None and decided.found_live == live_count and distinct):
        if wanted is None:
            wanted = {s.deployment_id for s in schedules}
        for record in live:
            if record.deployment_id in wanted:
                continue
            stored = known(record.deployment_id)
            deleted = None if stored is None else decide_delete(stored[1], now=now, actor=actor)
            if stored is not None and deleted is not None:
                deletions.append(PlannedWrite(record.deployment_id, stored[0], deleted))
    freed = sum(1 for d in deletions if d.event.schedule.enabled)
    room = max(0, cap - (enabled - decided.disabled - freed))
    writes = decided.planned
    if decided.enabling > room:  # rare: the last new enables of the list are refused
        writes, over = _over_capacity(writes, known, room)
        refused += [refusal(w.event.schedule, RefusalKind.CAPACITY,
                            capacity_reason(w.deployment_id, cap), at=now) for w in over]
    return ReconcilePlan(deletions + writes if deletions else writes, refused)


class _Decided(NamedTuple):
    """One pass over a reconcile's list: the changes, the Schedules refused by ``check``,
    and what the capacity and the deletions need to know."""

    planned: list[PlannedWrite]
    refused: list[Refusal]
    enabling: int
    """Changes that enable a deployment not stored enabled."""
    disabled: int
    """Changes that disable a deployment stored enabled."""
    found_live: int
    in_order: int


def _decide(schedules: Sequence[Schedule], known: Known, *, now: datetime, actor: str,
            check: Callable[[Schedule], None] | None,
            entry: Callable[[str], KnownEntry | None] | None,
            ordered: Iterable[KnownEntry] | None) -> _Decided:
    """Decide each Schedule on the table (see :func:`plan_reconcile`)."""
    planned: list[PlannedWrite] = []
    refused: list[Refusal] = []
    found_live = enabling = disabled = 0
    cursor: Iterator[KnownEntry] = iter(() if ordered is None else ordered)
    ahead = next(cursor, None)  # the table's next entry: where the list is expected to go on
    in_order = 0
    for schedule in schedules:
        deployment_id = schedule.deployment_id
        held: KnownEntry | None = None
        while ahead is not None:
            if ahead.record.deployment_id == deployment_id:
                held, ahead = ahead, next(cursor, None)
                in_order += 1
                break
            if not ahead.record.deleted:
                break  # out of the table's order: looked up below, the walk waits here
            ahead = next(cursor, None)  # a deleted Schedule the list does not give again
        if held is None and entry is not None:
            held = entry(deployment_id)
        if held is not None:
            seq, current = held.seq, held.record
        elif entry is not None:
            seq, current = 0, None
        else:
            known_one = known(deployment_id)
            seq, current = (0, None) if known_one is None else known_one
        if current is not None and not current.deleted:
            found_live += 1
            if _definition_equal(current, schedule):
                continue  # unchanged: nothing to write, nothing to check again
        if check is not None:
            try:
                check(schedule)
            except InvalidSchedule as exc:
                kind = (RefusalKind.TOO_LARGE if isinstance(exc, ScheduleTooLarge)
                        else RefusalKind.INVALID)
                refused.append(refusal(schedule, kind, str(exc), at=now))
                continue
        event = decide_apply(current, schedule, now=now, actor=actor)
        if event is None:
            continue
        was = current is not None and current.enabled and not current.deleted
        if schedule.enabled and not was:
            enabling += 1
        elif was and not schedule.enabled:
            disabled += 1
        planned.append(PlannedWrite(deployment_id, seq, event))
    return _Decided(planned, refused, enabling, disabled, found_live, in_order)


def _over_capacity(planned: list[PlannedWrite], known: Known, room: int
                   ) -> tuple[list[PlannedWrite], list[PlannedWrite]]:
    """The changes kept and those refused: of the changes that enable a deployment not
    stored enabled, the first ``room`` in the list's order are kept."""
    kept: list[PlannedWrite] = []
    over: list[PlannedWrite] = []
    for write in planned:
        stored = known(write.deployment_id)
        was = stored is not None and stored[1].enabled and not stored[1].deleted
        if write.event.schedule.enabled and not was:
            if room <= 0:
                over.append(write)
                continue
            room -= 1
        kept.append(write)
    return kept, over

"""AstraBox's Schedule changes, decided on the Schedule table and appended conditionally.

``apply``, ``delete`` and ``reconcile`` of the seam (the provider checks the process is
running and waits for the table: :mod:`.readiness`). Each change is a decision of the
functional core (:mod:`core.schedulecore`) on the stored state, appended by the Schedule
journal on the sequence it was decided on; a decision that loses its race is made again on
the stored state.

``reconcile`` is a diff against the table (docs/architecture.md, "Start-up and readiness,
and the Schedule table"): one leader read proves the table current, one pass decides every
Schedule (an unchanged one: no read, no write, no check; a list in the table's order is
walked beside it, without a lookup each), the changes are stored in batches. A Schedule it
cannot apply (a bad definition, too large, a deployment given twice, past the capacity) is
refused on its own: the others are applied and the missing ones deleted all the same, the
refused one keeps its stored Schedule, and the refusals are kept and logged
(:mod:`.refusals`) instead of raised, so a restart with one bad record still schedules every
other (docs/contract.md, "When reconcile refuses Schedules"). Store failures still raise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

from ..core import schedulecore, validation
from ..core.events import ScheduleEventType, ScheduleRecord, encode
from ..core.refusals import Refusal, RefusalKind, duplicates, refusal, repeated
from ..ports.schedules import Decide
from ..projections.schedule_table import ScheduleTable
from ..seam import InvalidSchedule, Schedule, ScheduleCapacityExceeded
from .memory import release_freed_memory
from .refusals import Refusals
from .wiring import Runtime

RELEASE_AFTER_RECONCILE = 50_000
"""A reconcile of at least this many Schedules hands the memory its temporaries used back to
the operating system when it ends (``malloc_trim``: a restart's reconcile of a million left
about 45 MB resident that nothing used)."""


class ScheduleChanges:
    """Decide and store AstraBox's Schedule changes for one provider process.

    ``cap``: ``max_active_schedules``; ``now``: the process's clock (the store's, running);
    ``refusals``: where the Schedules a reconcile refuses are kept (the running process's).
    """

    def __init__(self, table: ScheduleTable, *, cap: int, identity: str,
                 now: Callable[[], datetime], refusals: Refusals) -> None:
        self._table = table
        self._cap = cap
        self._identity = identity
        self._now = now
        self._refusals = refusals

    async def apply(self, running: Runtime, schedule: Schedule) -> None:
        validation.check_schedule(schedule)
        self._check_size(schedule,
                         validation.max_schedule_event_bytes(running.ports.max_payload))
        await running.schedules.write(schedule.deployment_id, self.apply_decision(schedule))
        self._refusals.clear(schedule.deployment_id)

    async def delete(self, running: Runtime, deployment_id: str) -> None:
        if not validation.usable_id(deployment_id):
            return  # an ID we could never have stored: deleting it is a no-op
        await running.schedules.write(deployment_id, self.delete_decision())
        self._refusals.clear(deployment_id)

    async def reconcile(self, running: Runtime, schedules: list[Schedule]) -> None:
        """Every Schedule given applied but those refused, every stored one not given
        deleted; a list of ``RELEASE_AFTER_RECONCILE`` or more gives its temporaries'
        memory back at the end."""
        count = len(schedules)
        try:
            await self._reconcile(running, schedules)
        finally:
            del schedules
            if count >= RELEASE_AFTER_RECONCILE:
                release_freed_memory()  # its sets, lists and decisions: tens of MB at 1M

    async def _reconcile(self, running: Runtime, wanted: list[Schedule]) -> None:
        limit = validation.max_schedule_event_bytes(running.ports.max_payload)

        def check(schedule: Schedule) -> None:
            validation.check_schedule(schedule)
            self._check_size(schedule, limit)

        table = self._table
        proven = await running.freshness.confirm(since=asyncio.get_running_loop().time())
        if proven is None:  # the table could not be proven current: decide on the leader's
            await self._one_by_one(running, wanted, check)
            return
        writes, refused = schedulecore.plan_reconcile(
            wanted, table.get_with_seq, table.live_records(), enabled=table.enabled_count(),
            cap=self._cap, now=self._now(), actor=self._identity, check=check,
            entry=table.entry, live_count=table.live_count(), ordered=table.in_table_order(),
            unique=validation.deployment_ids)
        # A tuple, not the plan's list: a tuple of untracked writes leaves the garbage
        # collector's lists at its first pass, where a list of a million (a first load's)
        # is walked by every full collection for the minute it takes to store.
        planned = tuple(writes)
        del writes
        self._refusals.replace(refused, given=len(wanted))
        by_id: dict[str, Schedule] = {}  # built only if a change must be decided again
        late: dict[str, Refusal] = {}

        def redecide(item: schedulecore.PlannedWrite) -> Decide:
            if not by_id:  # rare (a write raced ours): no index of a million for nothing
                by_id.update((s.deployment_id, s) for s in wanted)
            schedule = by_id.get(item.deployment_id)
            if schedule is None:
                return self.delete_decision()
            return self._refusing(self.apply_decision(schedule), schedule, late)

        await running.schedules.write_planned(planned, redecide)
        if late:
            self._refusals.add(list(late.values()))

    async def _one_by_one(self, running: Runtime, wanted: list[Schedule],
                          check: Callable[[Schedule], None]) -> None:
        """The reconcile on the leader's state, one change at a time, with the plan's rules:
        deletions first, then the changes that enable nothing new, then the new enables in
        the list's order (the capacity refuses the last of them)."""
        given = validation.deployment_ids(wanted)
        twice = repeated(wanted) if len(given) != len(wanted) else {}
        refused = duplicates(wanted, twice, at=self._now())
        valid: list[Schedule] = []
        for schedule in wanted:
            if schedule.deployment_id in twice:
                continue
            if schedulecore.unchanged(self._table.get(schedule.deployment_id), schedule):
                valid.append(schedule)  # checked when it was stored, as the plan has it
                continue
            try:
                check(schedule)
            except InvalidSchedule as exc:
                kind = (RefusalKind.TOO_LARGE if isinstance(exc, validation.ScheduleTooLarge)
                        else RefusalKind.INVALID)
                refused.append(refusal(schedule, kind, str(exc), at=self._now()))
                continue
            valid.append(schedule)
        self._refusals.replace(refused, given=len(wanted))
        for record in self._table.live():
            if record.deployment_id not in given:
                await self.delete(running, record.deployment_id)
        late: dict[str, Refusal] = {}
        enabling = [s for s in valid if s.enabled and not self._enabled(s.deployment_id)]
        for schedule in [*(s for s in valid if not s.enabled
                           or self._enabled(s.deployment_id)), *enabling]:
            await running.schedules.write(schedule.deployment_id, self._refusing(
                self.apply_decision(schedule), schedule, late))
        if late:
            self._refusals.add(list(late.values()))

    def _enabled(self, deployment_id: str) -> bool:
        record = self._table.get(deployment_id)
        return record is not None and record.enabled and not record.deleted

    def _refusing(self, decide: Decide, schedule: Schedule, late: dict[str, Refusal]) -> Decide:
        """``decide``, a capacity refusal kept in ``late`` and nothing written instead of
        raised (the decision of a change whose planned write lost its race)."""
        def refusing(current: ScheduleRecord | None) -> ScheduleEventType | None:
            try:
                event = decide(current)
            except ScheduleCapacityExceeded as exc:
                late[schedule.deployment_id] = refusal(schedule, RefusalKind.CAPACITY,
                                                       str(exc), at=self._now())
                return None
            late.pop(schedule.deployment_id, None)
            return event

        return refusing

    def _check_size(self, schedule: Schedule, limit: int) -> None:
        if validation.surely_fits(schedule, self._identity, limit):
            return
        first = schedulecore.decide_apply(None, schedule, now=self._now(),
                                          actor=self._identity)
        assert first is not None
        validation.check_schedule_size(schedule.deployment_id, len(encode(first)), limit)

    def apply_decision(self, schedule: Schedule) -> Decide:
        """What ``apply(schedule)`` writes on a given stored state (capacity checked)."""
        def decide(current: ScheduleRecord | None) -> ScheduleEventType | None:
            event = schedulecore.decide_apply(current, schedule, now=self._now(),
                                              actor=self._identity)
            if event is not None and schedule.enabled:
                schedulecore.check_capacity(
                    schedule.deployment_id, current,
                    self._table.enabled_count(excluding=schedule.deployment_id), self._cap)
            return event

        return decide

    def delete_decision(self) -> Decide:
        return lambda current: schedulecore.decide_delete(current, now=self._now(),
                                                          actor=self._identity)


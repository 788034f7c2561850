"""The pause gate: a scheduled Run stored after its Schedule stopped firing never starts.

The second half of the pause-visibility promise (the first is the firing's fresh read,
:mod:`.firing`). A create can reach the store late: a process frozen between its Schedule
read and the socket write. The dispatcher asks this gate once, before a Run's first claim
(or, for a Run stored already claimed, before its first handler call), and records FAILED
what it refuses (docs/architecture.md, "Firing and pause visibility").
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core import runcore
from ..core.events import RunRecord
from ..core.pause_visibility import FIRE_READ_MAX_AGE
from ..ports.runs import RunJournal
from ..ports.schedules import ScheduleJournal
from ..seam import Trigger


@dataclass(frozen=True, kw_only=True, eq=False)
class PauseGate:
    """Judges a Run's first start on the server's timestamps: the Run's first event against
    the Schedule as it stood at that instant."""

    runs: RunJournal
    schedules: ScheduleJournal

    async def may_start(self, record: RunRecord, *, vetted: bool) -> bool:
        """False for a scheduled Run stored only after its Schedule stopped firing.

        ``vetted``: this process stored it within ``FIRE_READ_MAX_AGE`` of its Schedule read,
        so no read is needed. Runs stored within ``FIRE_READ_MAX_AGE`` of being decided (all
        of them, unless their replica froze or its connection stalled mid-send) need one
        read; the others one more, of the Schedule as it stood.
        """
        if (vetted or record.trigger != Trigger.SCHEDULE or record.finished
                or (record.attempts > 0 and not runcore.claimed_at_create(record))):
            return True
        stored_at = await self.runs.first_stored_at(record.deployment_id, record.run_id)
        if stored_at is None:
            return True
        if (stored_at - record.created_at).total_seconds() <= FIRE_READ_MAX_AGE:
            return True
        schedule = await self.schedules.as_of(record.deployment_id, stored_at)
        return schedule is None or schedule.fires_at(stored_at)

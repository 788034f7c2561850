"""The Schedule journal: every Schedule's events, each change decided on the stored state.

A Schedule change (applied, deleted, held, released) is decided on the Schedule as the
journal stores it and appended only on that state's position: a concurrent writer makes the
append fail, and the change is decided again on the new state, so two replicas applying
different versions, or an operator holding while AstraBox applies, never lose one another's
change (:meth:`ScheduleJournal.write`). What this process stores or reads is applied at once
to its copy of every Schedule (the Schedule table, :class:`ScheduleCopies`); what others
store reaches it through the feed.

Implementations: ``jetstream/schedulelog.py`` (a stream, one subject per Schedule) and
``memory/schedules.py``; ``tests/test_ports_contract.py`` holds both to this contract.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol

from ..core.events import ScheduleEventType, ScheduleRecord
from ..core.schedulecore import PlannedWrite
from .feeds import Feed

Decide = Callable[[ScheduleRecord | None], ScheduleEventType | None]
"""Given the stored Schedule (None: never applied), the event to append, or None for none.

It may raise a seam error (for example ScheduleNotFound) to refuse the change."""

OnSchedule = Callable[[int, ScheduleRecord], None]
"""A Schedule's new state and its position, as a feed delivers it."""


class ScheduleCopies(Protocol):
    """This process's copy of each Schedule with its position: where what the journal
    stores or reads is applied, and what a first decision may be taken on (the runtime's
    ``ScheduleTable``)."""

    def apply(self, seq: int, record: ScheduleRecord) -> bool:
        """Take ``record`` as stored at ``seq`` (an older one is ignored)."""
        ...

    def get_with_seq(self, deployment_id: str) -> tuple[int, ScheduleRecord] | None:
        """The copy of a Schedule with the position it was stored at, or None."""
        ...


class ScheduleJournal(Protocol):
    """Append and read the events of Schedules (the module docstring is the contract)."""

    async def read(self, deployment_id: str) -> ScheduleRecord | None:
        """The Schedule as the authority stores it now (also applied to the copies)."""
        ...

    async def write(self, deployment_id: str, decide: Decide, *,
                    on_copy: bool = True) -> ScheduleRecord | None:
        """Decide on the stored state and append on its position; on a lost race, decide
        again. Returns the Schedule after the change (or as stored when ``decide`` wrote
        nothing). ``decide`` may be called more than than once and must not act beyond
        returning or raising; what it raises is raised. ``on_copy``: the first decision may
        be taken on this process's copy (a stale copy costs a refused append, never a lost
        change). ``SchedulerUnavailable`` after too many lost races or a failing store."""
        ...

    async def write_planned(self, planned: Sequence[PlannedWrite],
                            redecide: Callable[[PlannedWrite], Decide]) -> None:
        """Store changes decided on the copies (``reconcile``), each on the position it was
        decided on; one the journal refuses is decided again through :meth:`write` with
        ``redecide(planned)``: the outcome is that of one :meth:`write` per change."""
        ...

    async def as_of(self, deployment_id: str, instant: datetime) -> ScheduleRecord | None:
        """The Schedule as its last event stored at or before ``instant`` (the store's
        clock) left it; None when it did not exist then."""
        ...

    async def end_once(self) -> int:
        """The position of the journal's last event, from the authority, asked once: no
        retry, the failure raised as it came (a caller with a fallback of its own)."""
        ...

    async def settled(self) -> None:
        """Return once every Schedule whose last stored message a feed found foreign (not
        the provider's own: jetstream/foreign.py) has been read again, its last event of
        ours applied to the copies (a start's replay delivers only that foreign one)."""
        ...

    def feed(self, on_schedule: OnSchedule, *,
             on_skip: Callable[[], None] | None = None, after: int | None = None) -> Feed:
        """Every Schedule's last stored state, then each new one, to ``on_schedule``.
        ``after``: the copies hold every event up to this position already (a checkpoint):
        only the events after it, those stored already being the replay to catch up with.
        Not started: :meth:`Feed.subscribe`."""
        ...

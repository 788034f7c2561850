"""The console's messages: what workers and the live feed tell screens.

Workers do the I/O and post one of these; handlers only update widgets. Messages the app
forwards to screens do not bubble (they would come straight back to the app).
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from nats_scheduler.admin.api import (
    BulkResult,
    ClusterStatus,
    ErrorCode,
    RunList,
    RunView,
    ScheduleDetail,
    ScheduleView,
)


class BackendEvent(Message, bubble=False):
    """One event of the live feed (``AdminBackend.events``), forwarded to every live screen."""

    def __init__(self, event: object, seq: int) -> None:
        super().__init__()
        self.event = event
        self.seq = seq
        """The console's own running number of the event (rows of the tail are keyed by it)."""


class LinkRestored(Message, bubble=False):
    """The live feed is back after an outage: screens reload everything they show."""


class SchedulesLoaded(Message):
    def __init__(self, schedules: list[ScheduleView]) -> None:
        super().__init__()
        self.schedules = schedules


class DetailLoaded(Message):
    def __init__(self, detail: ScheduleDetail) -> None:
        super().__init__()
        self.detail = detail


class RunsLoaded(Message):
    """One page of Runs; ``page_before`` is the cursor this page was read with."""

    def __init__(self, runs: RunList, page_before: str | None) -> None:
        super().__init__()
        self.runs = runs
        self.page_before = page_before


class ClusterLoaded(Message):
    def __init__(self, status: ClusterStatus) -> None:
        super().__init__()
        self.status = status


@dataclass
class ActionOutcome:
    """What an operator action returned, for the screen to show at once."""

    verb: str
    schedule: ScheduleView | None = None
    run: RunView | None = None
    bulk: BulkResult | None = None


class ActionDone(Message):
    def __init__(self, outcome: ActionOutcome) -> None:
        super().__init__()
        self.outcome = outcome


class LoadFailed(Message):
    """A call failed; ``text`` is the backend's message (AstraBox words), ``code`` its code."""

    def __init__(self, what: str, text: str, code: ErrorCode) -> None:
        super().__init__()
        self.what = what
        self.text = text
        self.code = code

"""The console's messages: what workers and the live feed tell screens.

Workers do the I/O and post one of these; handlers only update widgets. Messages the app
forwards to screens do not bubble (they would come straight back to the app).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from textual.message import Message

from nats_scheduler.admin.api import (
    BulkResult,
    DueAccount,
    ErrorCode,
    RunList,
    RunView,
    ScheduleDetail,
    ScheduleView,
)

FeedItem = tuple[int, object]
"""An event of the live feed with the console's own running number (rows of the tail are
keyed by it)."""


class BackendEvents(Message, bubble=False):
    """A batch of the live feed (``AdminBackend.events``), forwarded to every live screen.

    Why batches: under a herd the feed brings hundreds of events a second; one message per
    event per screen kept every screen's message queue busy. The app gathers what arrived
    in a short interval and posts it once to each screen, which folds it in at once.
    """

    def __init__(self, events: Sequence[FeedItem]) -> None:
        super().__init__()
        self.events = events
        """Oldest first; the same list is shared by every screen: read it, do not change it."""


class LinkRestored(Message, bubble=False):
    """The live feed is back after an outage: screens reload everything they show."""


class SchedulesPage(Message):
    """One page of the Schedule list; ``last``: the load is complete. ``load`` numbers the
    load it belongs to (a page of a load already replaced is dropped)."""

    def __init__(self, schedules: list[ScheduleView], *, load: int, first: bool,
                 last: bool) -> None:
        super().__init__()
        self.schedules = schedules
        self.load = load
        self.first = first
        self.last = last


class BulkProgress(Message):
    """A bulk action moved on by one page (or ended: ``finished``)."""

    def __init__(self, tally: BulkTally, *, finished: bool) -> None:
        super().__init__()
        self.tally = tally
        self.finished = finished


@dataclass
class BulkTally:
    """What a paged bulk action did so far."""

    verb: str
    filter: str
    expected: int
    changed: int = 0
    unchanged: int = 0
    cancelled: bool = False
    failed: str | None = None
    changed_ids: list[str] = field(default_factory=list)

    @property
    def done(self) -> int:
        return self.changed + self.unchanged


class DetailLoaded(Message):
    def __init__(self, detail: ScheduleDetail) -> None:
        super().__init__()
        self.detail = detail


class DueTimesLoaded(Message):
    """One page of the account of due times; ``page_before`` is its cursor."""

    def __init__(self, account: DueAccount, page_before: datetime | None) -> None:
        super().__init__()
        self.account = account
        self.page_before = page_before


class RunsLoaded(Message):
    """One page of Runs; ``page_before`` is the cursor this page was read with."""

    def __init__(self, runs: RunList, page_before: str | None) -> None:
        super().__init__()
        self.runs = runs
        self.page_before = page_before


class AnswerLoaded(Message):
    """The one answer a view shows (``cluster.status``, ``schedules.load``): see
    ``screens/one_answer.py``."""

    def __init__(self, answer: object) -> None:
        super().__init__()
        self.answer = answer


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
    """A call failed; ``text`` is the backend's message (AstraBox words), ``code`` its code;
    ``busy``: the scheduler was busy and did nothing (``retry_after``), the link is fine."""

    def __init__(self, what: str, text: str, code: ErrorCode, *, busy: bool = False) -> None:
        super().__init__()
        self.what = what
        self.text = text
        self.code = code
        self.busy = busy

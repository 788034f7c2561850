"""The Schedules screen's model: every loaded Schedule, indexed for filter and sort.

Why a model and not the table's rows: with 100,000 Schedules, anything that walks every row
on every refresh (building cells, comparing them, sorting widget rows) costs seconds a
refresh. Here each Schedule is one entry, its filter text and sort key computed once when it
changes; the filtered, sorted order is a list of deployment IDs, recomputed only when
something that decides it changed (a new Schedule, a rename, a changed sort key), and cheaply
then: a nearly sorted list sorts in one pass. Cells are built by the table, for visible rows
only.

Pushed events are folded in at once (``schedule_record``, ``run_record``): the state a row
shows never waits for a reload, and a reload a moment behind the feed never steps a row back
(newest ``updated_at`` wins, as in :mod:`.live`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime

import msgspec

from nats_scheduler.admin.api import ScheduleView
from nats_scheduler.admin.views import schedule_state
from nats_scheduler.core import calendar
from nats_scheduler.core.events import RunRecord, ScheduleRecord
from nats_scheduler.seam import RunState

from .live import merge_schedule

_FAR = datetime.max.replace(tzinfo=UTC)
_STATE_ORDER = {"held": 0, "enabled": 1, "disabled": 2, "deleted": 3}
NEXT_DUE_COUNT = 3

SortKey = Callable[[ScheduleView], object]

SORTS: dict[str, tuple[str, SortKey]] = {
    "name": ("name", lambda s: (s.name.lower(), s.deployment_id)),
    "next": ("next due", lambda s: (s.next_due[0] if s.next_due and s.state == "enabled"
                                    else _FAR, s.name.lower(), s.deployment_id)),
    "state": ("state", lambda s: (_STATE_ORDER.get(s.state, 9), s.name.lower(),
                                  s.deployment_id)),
    "failures": ("failures", lambda s: (-s.failures_24h, s.name.lower(), s.deployment_id)),
    "last": ("last run", lambda s: (-(s.last_run_at.timestamp() if s.last_run_at else 0),
                                    s.name.lower(), s.deployment_id)),
}
"""Sort name -> (label, key). Ties break on the name, then the ID: the order is total."""


def needle_of(text: str) -> str:
    """The admin service's filter: a case-insensitive substring of the ID or the name."""
    return text.strip().casefold()


def _haystack(view: ScheduleView) -> str:
    return f"{view.deployment_id.casefold()}\x00{view.name.casefold()}"


def view_of(record: ScheduleRecord, now: datetime) -> ScheduleView:
    """A row for a Schedule first seen in the live feed (no Run of it loaded yet)."""
    fields = {name: getattr(record, name) for name in ScheduleRecord.__struct_fields__}
    due: list[datetime] = []
    if record.active:
        try:
            due = calendar.upcoming(record.cron, record.timezone, now, NEXT_DUE_COUNT)
        except ValueError:
            due = []
    return ScheduleView(**fields, state=schedule_state(record), next_due=due)


class ScheduleModel:
    """Deployment ID -> the Schedule's view; :meth:`rows` gives the filtered, sorted IDs."""

    def __init__(self) -> None:
        self._views: dict[str, ScheduleView] = {}
        self._hay: dict[str, str] = {}
        self._keys: dict[str, object] = {}
        self._order: list[str] = []
        self._stale: set[str] = set()
        """IDs whose sort key must be recomputed before the next :meth:`rows`."""
        self._resort = False
        self._deleted: set[str] = set()
        self.sort_key = "name"
        self.sort_reverse = False
        self._order_hay: list[str] | None = None
        """The filter text of each ID of ``_order``, in that order (a filter's one pass)."""
        self._rows: tuple[str, list[str]] | None = None
        """The last answer of :meth:`rows`: (needle, IDs), valid until the order changes."""
        self.counted_until: datetime | None = None
        """Failures up to this instant are in the loaded counts (the list's load began
        then): the feed's replay of older events must not count them again."""

    # ------------------------------------------------------------------ reads

    def __len__(self) -> int:
        return len(self._views)

    def __contains__(self, deployment_id: object) -> bool:
        return deployment_id in self._views

    def get(self, deployment_id: str | None) -> ScheduleView | None:
        return None if deployment_id is None else self._views.get(deployment_id)

    @property
    def live_count(self) -> int:
        """How many Schedules are not deleted."""
        return len(self._views) - len(self._deleted)

    def views(self) -> list[ScheduleView]:
        return list(self._views.values())

    def rows(self, text: str = "") -> list[str]:
        """IDs of the non-deleted Schedules matching ``text``, in the current sort order.

        Typing narrows a filter: when the new text contains the last one, only the last
        answer's rows are searched again.
        """
        needle = needle_of(text)
        self._sort()
        cached = self._rows
        if cached is not None and cached[0] == needle:
            return cached[1]
        if cached is not None and cached[0] and cached[0] in needle:
            hay = self._hay
            shown = [d for d in cached[1] if needle in hay[d]]
        else:
            if self._order_hay is None:
                self._order_hay = [self._hay[d] for d in self._order]
            if needle:
                shown = [d for d, h in zip(self._order, self._order_hay, strict=True)
                         if needle in h]
            else:
                shown = list(self._order)
            if self._deleted:
                shown = [d for d in shown if d not in self._deleted]
            if self.sort_reverse:
                shown.reverse()
        self._rows = (needle, shown)
        return shown

    def matching(self, text: str) -> list[ScheduleView]:
        """The Schedules a bulk action on ``text`` applies to (ordered as shown)."""
        return [self._views[d] for d in self.rows(text)]

    # ------------------------------------------------------------------ writes

    def set_sort(self, key: str, reverse: bool) -> None:
        if (key, reverse) == (self.sort_key, self.sort_reverse):
            return
        if key != self.sort_key:
            self._keys.clear()  # every key is recomputed for the new sort
            self._stale = set(self._views)
            self._resort = True
        self.sort_key, self.sort_reverse = key, reverse
        self._rows = None

    def load(self, views: Iterable[ScheduleView]) -> None:
        """Views read from the backend; a row already newer (pushed) keeps its definition."""
        for view in views:
            old = self._views.get(view.deployment_id)
            if old is not None and old.updated_at > view.updated_at:
                view = merge_schedule(view, old)
            self._put(view)

    def retain(self, wanted: set[str]) -> None:
        """After a complete reload: Schedules no longer listed are gone."""
        gone = [d for d in self._views if d not in wanted]
        for dep in gone:
            del self._views[dep], self._hay[dep]
            self._keys.pop(dep, None)
            self._deleted.discard(dep)
        if gone:
            self._order = [d for d in self._order if d in wanted]
            self._rows = self._order_hay = None

    def put(self, view: ScheduleView) -> None:
        """An action's answer: shown as is (it is the newest word on this Schedule)."""
        self._put(view)

    def schedule_record(self, record: ScheduleRecord, now: datetime) -> bool:
        """A ``schedule.*`` event: its record is the Schedule's state after it. Returns
        whether the Schedule's row changed."""
        old = self._views.get(record.deployment_id)
        if old is None:
            self._put(view_of(record, now))
            return True
        if record.updated_at <= old.updated_at:
            return False
        merged = merge_schedule(old, record)
        if (merged.cron, merged.timezone, merged.state) != (old.cron, old.timezone, old.state):
            merged = msgspec.structs.replace(merged, next_due=view_of(record, now).next_due)
        self._put(merged)
        return True

    def run_record(self, run: RunRecord, *, failed: bool) -> bool:
        """A ``run.*`` event: the Schedule's last Run (and failures) without a reload.
        Returns whether the Schedule's row changed."""
        old = self._views.get(run.deployment_id)
        if old is None:
            return False
        changes: dict[str, object] = {}
        newer = old.last_run_at is None or run.created_at >= old.last_run_at
        if newer and (old.last_run_state, old.last_run_at) != (run.state, run.created_at):
            changes.update(last_run_state=run.state, last_run_at=run.created_at)
        if failed and run.state == RunState.FAILED and (
                self.counted_until is None or run.updated_at > self.counted_until):
            changes["failures_24h"] = old.failures_24h + 1
        if changes:
            self._put(msgspec.structs.replace(old, **changes))
        return bool(changes)

    def _put(self, view: ScheduleView) -> None:
        dep = view.deployment_id
        old = self._views.get(dep)
        self._views[dep] = view
        if view.state == "deleted":
            self._deleted.add(dep)
        else:
            self._deleted.discard(dep)
        if old is None:
            self._order.append(dep)
            self._order_hay = None
            self._hay[dep] = _haystack(view)
            self._stale.add(dep)
            self._resort = True
            return
        if old.name != view.name:
            self._hay[dep] = _haystack(view)
            self._rows = self._order_hay = None
        if old.state != view.state and "deleted" in (old.state, view.state):
            self._rows = None
        self._stale.add(dep)

    def _sort(self) -> None:
        """Recompute the stale sort keys; re-sort only if one of them moved."""
        if self._stale:
            key = SORTS[self.sort_key][1]
            keys, views = self._keys, self._views
            for dep in self._stale:
                if dep not in views:
                    continue
                new = key(views[dep])
                if keys.get(dep, new) != new or dep not in keys:
                    self._resort = True
                keys[dep] = new
            self._stale = set()
        if self._resort:
            self._order.sort(key=self._keys.__getitem__)
            self._resort = False
            self._rows = self._order_hay = None


def age_out(view: ScheduleView, now: datetime) -> list[datetime]:
    """The view's next due times from ``now`` on (the loaded ones pass as time goes by)."""
    due = view.next_due
    if not due or due[0] > now or view.state != "enabled":
        return due
    future = [d for d in due if d > now]
    if future:
        return future
    try:
        return calendar.upcoming(view.cron, view.timezone, now, NEXT_DUE_COUNT)
    except ValueError:
        return []

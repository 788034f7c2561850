"""Folding pushed events into loaded views: newest wins, whichever way it arrived.

An event carries the state of its Run or Schedule *after* the event (events.py), so a
screen can show it at once, without asking the backend. A reload that follows may come
from a projection a moment behind the feed; these functions keep whichever of the two is
newer (by ``updated_at``), so a row never steps back.
"""

from __future__ import annotations

import msgspec

from nats_scheduler.admin.api import RunView, ScheduleView
from nats_scheduler.admin.views import schedule_state
from nats_scheduler.core.events import ScheduleRecord

__all__ = ["merge_schedule", "newest_run"]


def newest_run(loaded: RunView, pushed: RunView | None) -> RunView:
    if pushed is not None and pushed.updated_at > loaded.updated_at:
        return pushed
    return loaded


def merge_schedule(view: ScheduleView, pushed: ScheduleRecord | None) -> ScheduleView:
    """``view`` with the definition and hold of ``pushed`` when that is newer."""
    if pushed is None or pushed.updated_at <= view.updated_at:
        return view
    return msgspec.structs.replace(
        view, name=pushed.name, cron=pushed.cron, timezone=pushed.timezone,
        enabled=pushed.enabled, deleted=pushed.deleted, version=pushed.version,
        payload=pushed.payload, hold=pushed.hold, state=schedule_state(pushed),
        updated_at=pushed.updated_at,
    )

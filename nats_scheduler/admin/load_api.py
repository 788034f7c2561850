"""The admin API's types of the load ahead (``P.admin.schedules.load``): the scheduled Runs
due per minute with the herds the live replicas would not start in time (the request,
``LoadRequest``, is in ``request_api.py`` with the others).

Apart from ``api.py`` (which re-exports them) to keep that module within its size.
"""

from __future__ import annotations

from datetime import datetime

import msgspec


class LoadMinute(msgspec.Struct, frozen=True, kw_only=True):
    minute: datetime
    """A whole minute, UTC."""
    due: int
    """Scheduled Runs due in it, across every Schedule that fires then."""


class LoadAhead(msgspec.Struct, frozen=True, kw_only=True):
    """The scheduled Runs due in each minute ahead (admin/load.py): the minutes with at least
    one, ascending, and what the live replicas start in a minute's first seconds.

    ``capacity`` is what ``replicas`` start within ``lateness`` seconds at ``rate`` Runs a
    second each (core/herd.py, the figure ``status`` and ``doctor`` warn by); a minute with
    more due is a herd. None when no replica answered (read from the store).
    """

    minutes: list[LoadMinute]
    start: datetime
    end: datetime
    replicas: int | None = None
    rate: float = 0.0
    lateness: float = 0.0
    capacity: int | None = None

    def herds(self) -> list[LoadMinute]:
        """The minutes with more due than ``capacity``, the busiest first."""
        if self.capacity is None:
            return []
        over = [m for m in self.minutes if m.due > self.capacity]
        return sorted(over, key=lambda m: (-m.due, m.minute))

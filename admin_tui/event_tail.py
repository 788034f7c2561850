"""The newest events of the live feed, bounded: what the Events view can show.

Why a structure of its own: under a herd the feed brings hundreds of events a second, and
the tail keeps only the newest :data:`TAIL_LIMIT`. Appending and forgetting the oldest must
cost the same whatever the number kept (a deque for the order, a dict for the lookup by
row key), so the Events view can keep its tail current even while it is not shown and
build cells only for the rows it draws.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

from .messages import FeedItem

TAIL_LIMIT = 1000
"""Events kept in the tail (by the Events view and by the app, for a view opened later)."""


class EventTail:
    """The newest ``limit`` events by the console's running number; rows keyed ``str(seq)``."""

    def __init__(self, limit: int = TAIL_LIMIT) -> None:
        self.limit = limit
        self._order: deque[int] = deque()
        self._events: dict[str, object] = {}
        self.newest = 0
        """The running number of the newest event taken in (0: none yet)."""

    def __len__(self) -> int:
        return len(self._order)

    @property
    def oldest(self) -> int:
        """The running number of the oldest event kept (``newest + 1`` when empty)."""
        return self._order[0] if self._order else self.newest + 1

    def extend(self, items: Iterable[FeedItem]) -> list[tuple[str, object]]:
        """Take in ``items`` (oldest first) and forget what falls out of the limit.

        Items already taken in are skipped (a view opened while a batch was on its way sees
        its events twice: once in the app's buffer, once in the batch). Returns the rows
        added that are still kept, oldest first.
        """
        added: list[tuple[str, object]] = []
        for seq, event in items:
            if seq <= self.newest:
                continue
            self.newest = seq
            key = str(seq)
            self._order.append(seq)
            self._events[key] = event
            added.append((key, event))
        while len(self._order) > self.limit:
            del self._events[str(self._order.popleft())]
        return added[-self.limit:] if len(added) > self.limit else added

    def get(self, key: str | None) -> object | None:
        """The event of row ``key`` (None if it is no longer kept)."""
        return None if key is None else self._events.get(key)

    def items(self) -> Iterator[tuple[str, object]]:
        """Every event kept with its row key, oldest first."""
        return iter(self._events.items())

    def is_kept(self, key: str) -> bool:
        """Whether row ``key`` (a running number) is still in the tail."""
        return int(key) >= self.oldest

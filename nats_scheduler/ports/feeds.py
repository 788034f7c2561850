"""A feed: the events of a journal delivered to a projection, as they are stored.

A projection (the ledger of Runs, the table of Schedules) follows its journal: first what is
stored already (for Schedules, the last event of each; for Runs, nothing: a replica reads
the open Runs instead), then every new event. Delivery is at least once and in position
order; applying is idempotent by position (the projection ignores what it already has), so
a writer's own read-your-writes update and the later delivery of the same event are one.
An event the projection refuses (it does not decode, it names another aggregate than it is
filed under, it claims an impossible transition) is skipped, logged and counted: one bad
event never stops or stalls a projection.

Implementations: ``jetstream/follower.py`` (an ordered consumer) and ``memory/feeds.py``.
"""

from __future__ import annotations

from typing import Protocol


class Feed(Protocol):
    """One projection's feed."""

    applied_seq: int
    """The position of the last event applied (0: none yet)."""
    poisoned: int
    """Events skipped because the projection refused them."""
    last_poison: str | None
    """Which event was skipped last and why."""

    async def subscribe(self) -> None:
        """Start delivering; the replay of what is stored goes on in the background."""
        ...

    @property
    def replayed(self) -> bool:
        """Whether every event stored before :meth:`subscribe` has been applied."""
        ...

    async def caught_up(self, timeout: float = 30.0) -> None:
        """Return once the replay is done; TimeoutError after ``timeout`` seconds without
        any event applied (a long replay that keeps moving is waited for)."""
        ...

    async def stop(self) -> None:
        """Stop delivering (idempotent)."""
        ...

"""What screens and widgets may ask of the app: the seam between them and ``app.py``.

Screens never import the App class (that would tie every screen to the whole app and make
them hard to test alone); they see it through this protocol.
"""

from __future__ import annotations

from typing import Protocol

from textual.screen import Screen

from nats_scheduler.admin.api import AdminBackend, Health
from nats_scheduler.clock import Clock

from .messages import FeedItem


class ConsoleContext(Protocol):
    """The running console: backend, identity, permission, clock, live feed."""

    backend: AdminBackend
    user: str
    clock: Clock
    can_act: bool
    act_reason: str
    health: Health | None
    link: str
    debounce: float

    def subscribe(self, screen: Screen[object]) -> None:
        """Forward live events to ``screen`` until :meth:`unsubscribe`."""

    def unsubscribe(self, screen: Screen[object]) -> None: ...

    def recent_events(self) -> list[FeedItem]:
        """The events received so far (bounded) with their running numbers, oldest first."""

    def report_trouble(self, text: str) -> None:
        """A call failed as unavailable: show it and re-establish the live feed."""

    def refresh_health(self) -> None:
        """Reload the health signals (coalesced)."""

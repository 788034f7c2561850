"""The AstraBox scheduler console (``astrabox-sched-tui``): a thin Textual app.

The app owns what every screen shares — the backend (injected), who the user is and what
they may do, the injected clock, the live event feed and the health signals — and nothing
else. Screens, widgets and dialogs live in their own modules; all I/O runs in workers.

Embedding (``nats-scheduler demo``)::

    await run_console(backend, user="alice")            # inside a running event loop
    AstraboxConsole(backend=backend, user="alice")      # or build the App yourself
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import ClassVar

from textual import work
from textual.app import App
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.screen import Screen

from nats_scheduler.admin.api import AdminBackend, AdminError, Health
from nats_scheduler.clock import Clock, SystemClock
from nats_scheduler.core import events as ev

from .commands import ConsoleCommands
from .event_tail import TAIL_LIMIT
from .messages import BackendEvents, FeedItem, LinkRestored
from .screens.cluster import ClusterScreen
from .screens.connect import Connector, ConnectScreen
from .screens.events import EventsScreen
from .screens.load import LoadScreen
from .screens.schedules import SchedulesScreen

CHECKING_PERMISSION = "checking what this user may do…"
FEED_RETRY_MAX = 5.0
"""Longest wait between two attempts to re-open the live feed (seconds)."""
PERMISSION_RETRY_MAX = 30.0
"""Longest wait between two permission checks while the answer is no (seconds)."""
FEED_BATCH = 0.05
"""How long live events are gathered before they go to the screens as one batch (seconds):
short enough to look instant, long enough that a herd of 500 events a second costs each
screen 20 messages a second, not 500."""


class AstraboxConsole(App[None]):
    """The console. Give it a ``backend`` (already connected) or a ``connector``.

    ``clock`` is what relative times are computed from (tests freeze it); ``can_act``
    overrides the backend's answer to ``can_act()``; ``debounce`` is how long live events
    are coalesced before a screen reloads; ``feed_batch`` how long they are gathered before
    the screens get them (one message per screen per batch).
    """

    CSS_PATH = "console.tcss"
    TITLE = "AstraBox scheduler"
    COMMANDS = App.COMMANDS | {ConsoleCommands}
    MODES: ClassVar[dict[str, type[Screen[None]]]] = {  # type: ignore[assignment]
        "schedules": SchedulesScreen,
        "events": EventsScreen,
        "cluster": ClusterScreen,
        "load": LoadScreen,
    }
    BINDINGS: ClassVar[list[BindingType]] = [
        # Shown in the top bar's tabs rather than the footer (which keeps room for actions).
        Binding("1", "show('schedules')", "Schedules", show=False),
        Binding("2", "show('events')", "Events", show=False),
        Binding("3", "show('cluster')", "Cluster", show=False),
        Binding("4", "show('load')", "Load ahead", show=False),
        Binding("q", "quit", "Quit"),
    ]

    link: reactive[str] = reactive("connecting")
    health: reactive[Health | None] = reactive(None)
    can_act: reactive[bool] = reactive(False)

    def __init__(
        self,
        backend: AdminBackend | None = None,
        *,
        connector: Connector | None = None,
        user: str,
        clock: Clock | None = None,
        can_act: bool | None = None,
        target: str = "the scheduler",
        history: int = 100,
        debounce: float = 0.15,
        health_debounce: float = 0.5,
        retry_seconds: float = 3.0,
        feed_batch: float = FEED_BATCH,
    ) -> None:
        super().__init__()
        if backend is None and connector is None:
            raise ValueError("AstraboxConsole needs a backend or a connector")
        self.backend: AdminBackend = backend  # type: ignore[assignment]
        self.connector = connector
        self.user = user
        self.clock: Clock = clock or SystemClock()
        self.target = target
        self.history = history
        self.debounce = debounce
        self.health_debounce = health_debounce
        self.retry_seconds = retry_seconds
        self.feed_batch = feed_batch
        self._can_act_override = can_act
        self.act_reason = CHECKING_PERMISSION
        self._subscribers: list[Screen[object]] = []
        self._events: deque[FeedItem] = deque(maxlen=TAIL_LIMIT)
        self._batch: list[FeedItem] = []
        self._seq = 0
        self._health_pending = False

    # ------------------------------------------------------------------ start-up

    def on_mount(self) -> None:
        if self.backend is not None:
            self._attach()
        else:
            assert self.connector is not None
            self.push_screen(ConnectScreen(self.target, self.connector,
                                           retry_seconds=self.retry_seconds))

    def on_connect_screen_connected(self, message: ConnectScreen.Connected) -> None:
        self.backend = message.backend
        self.pop_screen()
        self._attach()

    def _attach(self) -> None:
        if self._can_act_override is not None:
            self._set_permission(self._can_act_override,
                                 "this console was started read-only")
        else:
            self._load_permission()
        self.switch_mode("schedules")
        self.follow_events(self.history)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "show":
            return self.backend is not None
        return True

    def action_show(self, mode: str) -> None:
        self.switch_mode(mode)

    # ------------------------------------------------------------------ permission

    @work(group="permission", exclusive=True, exit_on_error=False)
    async def _load_permission(self) -> None:
        """Ask the backend what this user may do; while the answer is no, ask again.

        A no is often passing (a server just restarted, a scheduler process not yet
        listening, an operator's permissions being fixed): asking again with a growing
        pause means the console does not stay read-only until its next reconnect.
        """
        delay = 1.0
        while True:
            try:
                allowed, reason = await self.backend.can_act()
            except AdminError as exc:
                allowed, reason = False, f"could not check permissions ({exc.message})"
            except Exception:  # read-only is the safe answer to any failure
                allowed, reason = False, "could not check permissions"
            self._set_permission(allowed, reason or "")
            if allowed:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, PERMISSION_RETRY_MAX)

    def _set_permission(self, allowed: bool, reason: str) -> None:
        self.act_reason = reason or f"user {self.user!r} may not request actions"
        self.can_act = allowed

    def watch_can_act(self, _allowed: bool) -> None:
        for screen in self._subscribers:
            screen.refresh_bindings()

    # ------------------------------------------------------------------ live feed

    def subscribe(self, screen: Screen[object]) -> None:
        if screen not in self._subscribers:
            self._subscribers.append(screen)

    def unsubscribe(self, screen: Screen[object]) -> None:
        if screen in self._subscribers:
            self._subscribers.remove(screen)

    def recent_events(self) -> list[FeedItem]:
        return list(self._events)

    @work(group="feed", exclusive=True, exit_on_error=False)
    async def follow_events(self, history: int) -> None:
        """Follow the backend's event stream for as long as the console runs.

        Each (re)connection first asks for the health signals: an answer proves the admin
        service is reachable, so the link shows live even before the first event. When the
        stream breaks, retry with a growing pause (at most ``FEED_RETRY_MAX``); on success
        every screen reloads, since events during the outage were not seen.
        """
        delay = 0.5
        while True:
            try:
                health = await self.backend.health()
                self._link_up(health)
                delay = 0.5
                async for event in self.backend.events(history=history):
                    self._deliver(event)
                text = "the live feed ended"
            except AdminError as exc:
                text = exc.message
            except Exception:  # the feed must outlive any failure
                text = "the connection to the scheduler broke"
            history = 0
            self._link_down(text)
            await asyncio.sleep(delay)
            delay = min(delay * 2, FEED_RETRY_MAX)

    def _deliver(self, event: object) -> None:
        """Number the event and gather it; the first of a batch starts the batch's timer."""
        self._seq += 1
        item = (self._seq, event)
        self._events.append(item)
        self._batch.append(item)
        if len(self._batch) == 1:
            self.set_timer(self.feed_batch, self._send_batch, name="feed-batch")

    def _send_batch(self) -> None:
        """One message per screen for everything gathered since the batch began."""
        batch, self._batch = self._batch, []
        if not batch:
            return
        for screen in list(self._subscribers):
            screen.post_message(BackendEvents(batch))
        if any(isinstance(event, (ev.RunEvent, ev.ScheduleEvent)) for _, event in batch):
            self.refresh_health()

    def _link_up(self, health: Health) -> None:
        was_lost = self.link == "lost"
        self.health = health
        self.link = "live"
        if was_lost:
            self.notify("Reconnected to the scheduler", title="Live again")
            for screen in list(self._subscribers):
                screen.post_message(LinkRestored())
            if self._can_act_override is None:
                self._load_permission()

    def _link_down(self, text: str) -> None:
        if self.link != "lost":
            self.notify(f"{text}; reconnecting…", title="Connection lost", severity="error")
        self.link = "lost"

    def connection_lost(self, text: str) -> None:
        """The connection itself reports a drop (its reconnect callback follows)."""
        if self.link != "lost":
            self._link_down(text)

    def connection_restored(self) -> None:
        """The connection is back: re-open the feed; its first answer reloads every screen."""
        if self.backend is not None:
            self.follow_events(0)

    def report_trouble(self, text: str) -> None:
        if self.link == "live":
            self._link_down(text)
            self.follow_events(0)

    # ------------------------------------------------------------------ health

    def refresh_health(self) -> None:
        if not self._health_pending:
            self._health_pending = True
            self.set_timer(self.health_debounce, self._load_health, name="health")

    @work(group="health", exclusive=True, exit_on_error=False)
    async def _load_health(self) -> None:
        self._health_pending = False
        # On failure the feed reports the connection trouble; the last health stays shown.
        with contextlib.suppress(AdminError):
            self.health = await self.backend.health()


async def run_console(
    backend: AdminBackend,
    *,
    user: str,
    can_act: bool | None = None,
    clock: Clock | None = None,
) -> None:
    """Run the console in the current event loop until the operator quits."""
    await AstraboxConsole(backend=backend, user=user, can_act=can_act, clock=clock).run_async()


"""What every console screen shares: top bar, live feed, coalesced reloads, repaint tick,
permission-aware action keys, and error reporting for workers.

A screen the operator does not see does no widget work: with Textual's modes every view
visited once stays mounted, and under a herd of events each of them redrawing what nobody
looks at made the one shown sluggish. A hidden screen keeps its data current (what
``absorb`` folds in is cheap) and catches up once when it is shown again.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence
from typing import Any, ClassVar, TypeVar, cast

from textual import events
from textual.binding import Binding
from textual.screen import Screen

from nats_scheduler.admin.api import AdminError, ErrorCode

from ..context import ConsoleContext
from ..messages import BackendEvents, FeedItem, LinkRestored, LoadFailed

T = TypeVar("T")

OPERATOR_ACTIONS = frozenset(
    {"hold", "release", "hold_bulk", "release_bulk", "run_now", "replay"}
)
"""Actions that change something; the auditor sees them dimmed and is told why."""

UNAVAILABLE_TEXT = "the scheduler did not answer (connection lost?)"

PAINT = "paint"
"""What ``absorb`` returns for "repaint right after this batch" (from data it folded in)."""


class ConsoleScreen(Screen[None]):
    """Base of the four live screens.

    Live events arrive in batches (the app gathers them) and are *coalesced*: the first
    batch after a quiet period starts a short timer (``debounce``, or what is left of
    ``min_reload_interval`` since the last reload), later ones only add to the dirty set,
    and one reload follows. A burst of a thousand events therefore costs one reload. The
    1 s tick only re-renders relative times from data already loaded: no I/O.

    While the screen is hidden, batches are folded in but nothing is reloaded or drawn; the
    dirty set waits, and :meth:`catch_up` runs it once when the screen is shown again.
    """

    min_reload_interval: ClassVar[float] = 0.0
    """Least time between two reloads started by the live feed (seconds)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._dirty: set[str | None] = set()
        self._flush_pending = False
        self._reload_all = False
        """Everything must be reloaded when the screen is shown (the link came back)."""
        self._reloaded_at = -float("inf")
        self._shown_before = False

    @property
    def console(self) -> ConsoleContext:
        return cast(ConsoleContext, self.app)

    @property
    def shown(self) -> bool:
        """On screen: the current screen, or under a dialog only (Textual's ``is_current``)."""
        return self.is_mounted and self.is_current

    # ---------------------------------------------------------------- life cycle

    def on_mount(self) -> None:
        self.console.subscribe(self)
        self.set_interval(1.0, self._tick, name="repaint")
        self.reload(None)

    def on_unmount(self) -> None:
        self.console.unsubscribe(self)

    # ---------------------------------------------------------------- live feed

    def _tick(self) -> None:
        if self.shown:
            self.repaint()

    def on_backend_events(self, message: BackendEvents) -> None:
        keys = self.absorb_batch(message.events)
        if PAINT in keys:
            keys.discard(PAINT)
            if self.shown:
                self.repaint()
        if keys:
            self.request_reload(keys)

    def request_reload(self, keys: set[str | None]) -> None:
        """Reload ``keys`` as the live feed does: coalesced, and only while shown."""
        self._dirty |= keys
        self._schedule_flush(self.console.debounce)

    def _schedule_flush(self, delay: float) -> None:
        """Reload what is dirty after ``delay`` (at least ``min_reload_interval`` after the
        last reload); nothing while hidden: :meth:`catch_up` does it when shown."""
        if self._flush_pending or not self.shown:
            return
        wait = self._reloaded_at + self.min_reload_interval - time.monotonic()
        delay = max(delay, wait)
        if delay <= 0:
            self._flush()
            return
        self._flush_pending = True
        self.set_timer(delay, self._flush, name="coalesce")

    def _flush(self) -> None:
        self._flush_pending = False
        if not self.shown or not self._dirty:
            return  # hidden meanwhile: the dirty set waits for catch_up
        dirty, self._dirty = self._dirty, set()
        self._reloaded_at = time.monotonic()
        self.reload(dirty)

    def on_link_restored(self, _message: LinkRestored) -> None:
        if self.shown:
            self.reload(None)
        else:
            self._reload_all = True

    def on_screen_resume(self) -> None:
        # The first resume is the first show: mounting loaded everything (and the widgets
        # may not be mounted yet: an update then would leave their size unchanged).
        if self._shown_before:
            self.catch_up()
        self._shown_before = True

    def catch_up(self) -> None:
        """Shown again: do once what was left while hidden, then redraw from the data."""
        if self._reload_all:
            self._reload_all = False
            self._dirty = set()
            self.reload(None)
        elif self._dirty:
            self._schedule_flush(0.0)
        self.repaint()

    def absorb_batch(self, events: Sequence[FeedItem]) -> set[str | None]:
        """Take in a batch of pushed events (oldest first); what to reload, as :meth:`absorb`."""
        keys: set[str | None] = set()
        for _seq, event in events:
            keys |= self.absorb(event)
        return keys

    def absorb(self, event: object) -> set[str | None]:
        """Take in a pushed event: apply what it carries at once (no I/O) and return which
        of this screen's data to reload (empty: nothing; :data:`PAINT`: repaint after the
        batch). Runs whether or not the screen is shown: no widget work here."""
        return set()

    def reload(self, dirty: set[str | None] | None) -> None:
        """Start the workers that load what ``dirty`` names (None: everything)."""

    def repaint(self) -> None:
        """Re-render time-relative cells from loaded data (the 1 s tick; no I/O)."""

    # ---------------------------------------------------------------- workers

    async def guarded(self, what: str, call: Awaitable[T]) -> T | None:
        """Await a backend call; on failure post :class:`LoadFailed` and return None.

        The backend raises :class:`AdminError` in AstraBox's words; anything else means
        the connection broke under the call, which is reported the same way.
        """
        try:
            return await call
        except AdminError as exc:
            self.post_message(LoadFailed(what, exc.message, exc.code,
                                         busy=exc.retry_after is not None))
        except Exception:  # a worker must never take the console down
            self.post_message(LoadFailed(what, UNAVAILABLE_TEXT, ErrorCode.UNAVAILABLE))
        return None

    def on_load_failed(self, message: LoadFailed) -> None:
        if message.busy:  # the scheduler answered: busy, not a lost connection
            self.notify(message.text, title=f"{message.what}: busy", severity="warning")
            return
        if message.code == ErrorCode.UNAVAILABLE:
            self.console.report_trouble(message.text)
        self.notify(message.text, title=f"{message.what} failed", severity="error")

    # ---------------------------------------------------------------- permission

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Operator actions are shown dimmed (None) for a user who may not act."""
        if action in OPERATOR_ACTIONS and not self.console.can_act:
            return None
        return True

    def on_key(self, event: events.Key) -> None:
        """A dimmed action key still answers: it says why it is disabled."""
        if self.console.can_act:
            return
        for binding in _own_bindings(type(self)):
            if event.key in binding.key.split(",") and binding.action in OPERATOR_ACTIONS:
                event.stop()
                self.notify(disabled_text(binding.description, self.console.act_reason),
                            title="Read-only", severity="warning")
                return


def _own_bindings(cls: type) -> list[Binding]:
    """The Binding objects a screen class and its bases declare."""
    return [b for klass in cls.__mro__ for b in vars(klass).get("BINDINGS", ())
            if isinstance(b, Binding)]


def disabled_text(description: str, reason: str) -> str:
    return f"{description} is disabled: {reason}"

"""What every console screen shares: top bar, live feed, coalesced reloads, repaint tick,
permission-aware action keys, and error reporting for workers.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, TypeVar, cast

from textual import events
from textual.binding import Binding
from textual.screen import Screen

from nats_scheduler.admin.api import AdminError, ErrorCode

from ..context import ConsoleContext
from ..messages import BackendEvent, LinkRestored, LoadFailed

T = TypeVar("T")

OPERATOR_ACTIONS = frozenset(
    {"hold", "release", "hold_bulk", "release_bulk", "run_now", "replay"}
)
"""Actions that change something; the auditor sees them dimmed and is told why."""

UNAVAILABLE_TEXT = "the scheduler did not answer (connection lost?)"


class ConsoleScreen(Screen[None]):
    """Base of the four live screens.

    Live events are *coalesced*: the first event after a quiet period starts a short timer
    (``debounce``), later events only add to the dirty set, and one reload follows. A burst
    of a thousand events therefore costs one reload, and none waits longer than the timer.
    The 1 s tick only re-renders relative times from data already loaded: no I/O.
    """


    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._dirty: set[str | None] = set()
        self._flush_pending = False

    @property
    def console(self) -> ConsoleContext:
        return cast(ConsoleContext, self.app)

    # ---------------------------------------------------------------- life cycle

    def on_mount(self) -> None:
        self.console.subscribe(self)
        self.set_interval(1.0, self.repaint, name="repaint")
        self.reload(None)

    def on_unmount(self) -> None:
        self.console.unsubscribe(self)

    # ---------------------------------------------------------------- live feed

    def on_backend_event(self, message: BackendEvent) -> None:
        keys = self.absorb(message.event)
        if not keys:
            return
        self._dirty |= keys
        if not self._flush_pending:
            self._flush_pending = True
            self.set_timer(self.console.debounce, self._flush, name="coalesce")

    def _flush(self) -> None:
        dirty, self._dirty, self._flush_pending = self._dirty, set(), False
        self.reload(dirty)

    def on_link_restored(self, _message: LinkRestored) -> None:
        self.reload(None)

    def absorb(self, event: object) -> set[str | None]:
        """Take in a pushed event: apply what it carries at once (no I/O) and return which
        of this screen's data to reload (empty: nothing)."""
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
            self.post_message(LoadFailed(what, exc.message, exc.code))
        except Exception:  # a worker must never take the console down
            self.post_message(LoadFailed(what, UNAVAILABLE_TEXT, ErrorCode.UNAVAILABLE))
        return None

    def on_load_failed(self, message: LoadFailed) -> None:
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

"""The screen shown until the console has a backend: never a traceback.

It says what went wrong in operators' words (server unreachable, credentials refused,
admin service not answering), what to check, and retries by itself every few seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Center, Middle, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Label, Static

from nats_scheduler.admin.api import AdminBackend, AdminError, ErrorCode
from nats_scheduler.jetstream.connection import ConnectFailed, FailureKind
from nats_scheduler.seam import SchedulerConfigurationError, SchedulerError

Connector = Callable[[], Awaitable[AdminBackend]]

REFUSED_HINT = ("Check --creds, or --user and --password "
                "(ASTRABOX_NATS_CREDS, ASTRABOX_NATS_USER, ASTRABOX_NATS_PASSWORD).")
UNREACHABLE_HINT = ("Check --url (ASTRABOX_NATS_URL) and --prefix (ASTRABOX_NATS_PREFIX), "
                    "and that a provider process with the admin service is running.")
UNTRUSTED_HINT = ("Check --tls-ca (ASTRABOX_NATS_TLS_CA) and that the host name in --url "
                  "is the one in the server's certificate.")
TLS_REFUSED_HINT = ("Check --tls-cert and --tls-key (ASTRABOX_NATS_TLS_CERT, "
                    "ASTRABOX_NATS_TLS_KEY): the server may require a client certificate.")

_BY_KIND = {
    FailureKind.REFUSED_CREDENTIALS: ("The server refused the credentials", REFUSED_HINT),
    FailureKind.TLS_UNTRUSTED: ("The server's certificate is not trusted", UNTRUSTED_HINT),
    FailureKind.TLS_REFUSED: ("The server refused the TLS connection", TLS_REFUSED_HINT),
    FailureKind.UNREACHABLE: ("Cannot reach the scheduler", UNREACHABLE_HINT),
}


def describe_failure(exc: BaseException, target: str) -> tuple[str, str, str]:
    """(title, what happened, what to check) for a failed connection attempt.

    A failed connect is judged once, by ``classify_connect_failure`` (its kind travels on
    the ``ConnectFailed`` error); the screen never guesses from an error's text.
    """
    text = str(exc) if isinstance(exc, (SchedulerError, AdminError)) and str(exc) else ""
    if isinstance(exc, ConnectFailed):
        title, hint = _BY_KIND[exc.failure.kind]
        return title, text, hint
    if isinstance(exc, AdminError) and exc.code == ErrorCode.FORBIDDEN:
        return ("The server refused the credentials", text or f"{target} refused the login",
                REFUSED_HINT)
    if isinstance(exc, SchedulerConfigurationError):
        return ("The console is not configured correctly", text, UNREACHABLE_HINT)
    return ("Cannot reach the scheduler", text or f"no answer from {target}", UNREACHABLE_HINT)


class ConnectScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "retry", "Retry now"),
        Binding("q", "app.quit", "Quit"),
    ]

    class Connected(Message):
        """A connection attempt succeeded."""

        def __init__(self, backend: AdminBackend) -> None:
            super().__init__()
            self.backend = backend

    def __init__(self, target: str, connector: Connector, *, retry_seconds: float = 3.0) -> None:
        super().__init__(id="connect-screen")
        self.target = target
        self.connector = connector
        self.retry_seconds = retry_seconds
        self.attempts = 0

    def compose(self) -> ComposeResult:
        with Middle(), Center(), Vertical(id="connect-box"):
            yield Label("AstraBox scheduler console", id="connect-title")
            yield Label(f"Connecting to {self.target}…", id="connect-status")
            yield Static("", id="connect-detail")
            yield Static("", id="connect-hint")
            yield Label("", id="connect-retry")
        yield Footer()

    def on_mount(self) -> None:
        self.attempt()

    @work(group="connect", exclusive=True, exit_on_error=False)
    async def attempt(self) -> None:
        while True:
            self.attempts += 1
            self._show(f"Connecting to {self.target}…", "", "", "")
            try:
                backend = await self.connector()
            except Exception as exc:  # every failure is shown, none crashes the console
                title, detail, hint = describe_failure(exc, self.target)
                await self._count_down(title, detail, hint)
                continue
            self.post_message(self.Connected(backend))
            return

    async def _count_down(self, title: str, detail: str, hint: str) -> None:
        self._show(title, detail, hint,
                   f"Attempt {self.attempts} failed. Retrying every {self.retry_seconds:g} s "
                   "by itself · r: retry now · q: quit")
        await asyncio.sleep(self.retry_seconds)

    def _show(self, title: str, detail: str, hint: str, retry: str) -> None:
        self.query_one("#connect-status", Label).update(title)
        self.set_class(bool(detail), "-failed")
        self.query_one("#connect-detail", Static).update(detail)
        self.query_one("#connect-hint", Static).update(hint)
        self.query_one("#connect-retry", Label).update(retry)

    def action_retry(self) -> None:
        self.attempt()

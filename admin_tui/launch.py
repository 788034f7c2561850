"""``astrabox-sched-tui``: flags and environment -> a connection -> the console.

The console reads the same ``ASTRABOX_NATS_*`` settings as the provider and the command
line (``NatsSettings.from_env``); flags override them. It connects inside the app (the
connect screen shows failures and retries), so a server that is down or credentials that
are refused give a clear screen, never a traceback. After the first connection the
connection reconnects by itself; its disconnect/reconnect callbacks drive the console's
link indicator and the reload after an outage.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import sys
from collections.abc import Sequence
from urllib.parse import urlsplit

from nats_scheduler.admin.api import AdminBackend
from nats_scheduler.admin.client import AdminClient
from nats_scheduler.jetstream.connection import (
    ConnectFailed,
    ConnectFailure,
    FailureKind,
    connect_error,
    open_connection,
)
from nats_scheduler.jetstream.permissions import ViolationLog
from nats_scheduler.seam import SchedulerConfigurationError
from nats_scheduler.settings import NatsSettings, connection_flags_env

from .app import AstraboxConsole

CLIENT_NAME = "astrabox-sched-tui"
FLAGS = connection_flags_env()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="astrabox-sched-tui",
        description="Live operator console of the AstraBox 'nats' scheduler. "
                    "Flags override the ASTRABOX_NATS_* environment.",
    )
    for name, env in FLAGS.items():
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, dest=name, default=None, help=f"overrides {env}")
    parser.add_argument("--as", dest="as_user", default=None, metavar="NAME",
                        help="who actions are recorded as (default: --user, else the login)")
    parser.add_argument("--read-only", action="store_true",
                        help="never offer actions, whatever the user may do")
    return parser


def settings_from(args: argparse.Namespace, environ: dict[str, str] | None = None
                  ) -> NatsSettings:
    """Environment first, then the flags given; validated (SchedulerConfigurationError)."""
    settings = NatsSettings.from_env(environ)
    changes = {name: getattr(args, name) for name in FLAGS if getattr(args, name) is not None}
    return settings.with_(**changes).validated()


def display_target(settings: NatsSettings) -> str:
    """The server URLs without any user:password part, for the screen."""
    shown = []
    for url in settings.servers:
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        host = parts.hostname or "?"
        shown.append(f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}")
    return ", ".join(shown)


def console_error(failure: ConnectFailure, settings: NatsSettings) -> ConnectFailed:
    """The console's words for a failed attempt (the connect screen adds what to check)."""
    target = display_target(settings)
    said = {
        FailureKind.REFUSED_CREDENTIALS: f"the server at {target} refused the credentials",
        FailureKind.TLS_UNTRUSTED: f"the TLS certificate of the server at {target} is not "
                                   "trusted",
        FailureKind.TLS_REFUSED: f"the server at {target} refused the TLS connection; it may "
                                 "require a client certificate",
        FailureKind.UNREACHABLE: f"no server answered at {target} within "
                                 f"{settings.connect_timeout:g} s",
    }
    return connect_error(failure, said[failure.kind])


class ConnectionLink:
    """Connects and relays the connection's own events to the console.

    The app is attached after construction (the app needs the connector, the connector's
    callbacks need the app). Connecting is the provider's own :func:`open_connection`, so
    the console judges a failed attempt exactly as the provider does, from every error seen
    (a refused login is often followed by a reset connection), and only words it its way.
    """

    def __init__(self, settings: NatsSettings) -> None:
        self.settings = settings
        self.app: AstraboxConsole | None = None
        self.client: AdminClient | None = None

    async def connect(self) -> AdminBackend:
        """One attempt; raises ConnectMisconfigured or ConnectUnavailable (seam errors)."""
        settings = self.settings
        violations = ViolationLog()
        opened = await open_connection(
            settings, CLIENT_NAME, error_cb=violations.on_error,
            disconnected_cb=self._on_disconnected, reconnected_cb=self._on_reconnected)
        if isinstance(opened, ConnectFailure):
            raise console_error(opened, settings)
        client = AdminClient(opened, settings.prefix, timeout=min(settings.call_timeout, 5.0),
                             lease_seconds=settings.lease_seconds, violations=violations)
        self.client = client
        return client

    async def _on_disconnected(self) -> None:
        if self.app is not None and self.app.is_running:
            self.app.connection_lost("the connection to the server dropped")

    async def _on_reconnected(self) -> None:
        if self.app is not None and self.app.is_running:
            self.app.connection_restored()

    async def close(self) -> None:
        if self.client is not None and not self.client.nc.is_closed:
            self.app = None
            await self.client.nc.close()


def default_user(args: argparse.Namespace, settings: NatsSettings) -> str:
    if args.as_user:
        return str(args.as_user)
    if settings.user:
        return settings.user
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "operator"


async def _run(link: ConnectionLink, app: AstraboxConsole) -> None:
    link.app = app
    try:
        await app.run_async()
    finally:
        await link.close()


def launch(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = settings_from(args)
    except SchedulerConfigurationError as exc:
        print(f"astrabox-sched-tui: {exc}", file=sys.stderr)
        return 2
    link = ConnectionLink(settings)
    app = AstraboxConsole(
        connector=link.connect, user=default_user(args, settings),
        can_act=False if args.read_only else None, target=display_target(settings),
    )
    asyncio.run(_run(link, app))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``astrabox-sched-tui``: flags/environment -> connection -> console."""
    return launch(argv)


if __name__ == "__main__":
    raise SystemExit(main())

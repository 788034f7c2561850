"""Connecting to the scheduler store, and telling why a connection could not be made.

The provider, the command line and the console all connect through :func:`connect`, so a
refused login, an untrusted certificate and an unreachable server are told apart in one
place, in AstraBox's words, naming the setting to check.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import Awaitable, Callable

import nats
import nats.errors
from nats.aio.client import Client

from ..seam import SchedulerConfigurationError, SchedulerError
from ..settings import NatsSettings
from . import errors

MIN_SERVER_VERSION = (2, 12, 3)
"""Conditional publishes had clustered-correctness fixes up to 2.12.3 (docs/design.md,
"Minimum server version")."""

def parse_version(text: str) -> tuple[int, int, int]:
    """``"2.15.1"`` or ``"v2.12.3-beta"`` -> (2, 15, 1); unknown -> (0, 0, 0)."""
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", text or "")
    if not match:
        return (0, 0, 0)
    major, minor, patch = (int(g) for g in match.groups())
    return (major, minor, patch)


def _tls_context(settings: NatsSettings) -> ssl.SSLContext | None:
    if not (settings.tls_ca or settings.tls_cert):
        return None
    context = ssl.create_default_context(cafile=settings.tls_ca)
    if settings.tls_cert and settings.tls_key:
        context.load_cert_chain(settings.tls_cert, settings.tls_key)
    return context


def connect_options(settings: NatsSettings, name: str) -> dict[str, object]:
    """The nats.connect keyword arguments for these settings (shared with CLI and console)."""

    async def quiet(_exc: Exception) -> None:
        # nats-py prints every connection error by default; the provider reports them
        # through its own errors instead.
        return None

    options: dict[str, object] = {
        "servers": settings.servers,
        "name": name,
        "connect_timeout": min(settings.connect_timeout, 2.0),
        "error_cb": quiet,
        # Fail fast on the FIRST connect (nats-py would otherwise retry for ~2
        # minutes, docs/design.md, "The first-connect retry trap"); :func:`connect`
        # switches to unlimited reconnects afterwards.
        "allow_reconnect": True,
        "max_reconnect_attempts": 1,
        "reconnect_time_wait": 0.1,
        "ping_interval": 5,
        "max_outstanding_pings": 3,
    }
    if settings.user is not None:
        options["user"] = settings.user
        options["password"] = settings.password
    if settings.creds:
        options["user_credentials"] = settings.creds
    tls = _tls_context(settings)
    if tls is not None:
        options["tls"] = tls
    return options


async def connect(
    settings: NatsSettings,
    name: str,
    *,
    disconnected_cb: Callable[[], Awaitable[None]] | None = None,
    reconnected_cb: Callable[[], Awaitable[None]] | None = None,
) -> Client:
    """Connect, failing within ``connect_timeout`` when no server answers.

    Afterwards the connection reconnects forever: a provider that lost its server must come
    back by itself once the server does. The callbacks let a console say so while it waits.
    """
    options = connect_options(settings, name)
    if disconnected_cb is not None:
        options["disconnected_cb"] = disconnected_cb
    if reconnected_cb is not None:
        options["reconnected_cb"] = reconnected_cb
    seen: list[Exception] = []

    async def remember(exc: Exception) -> None:
        # nats-py reports why a first connect fails (refused credentials, TLS) only to this
        # callback, then raises NoServersError or hangs until the timeout: keep the reason.
        if len(seen) < 8:
            seen.append(exc)

    options["error_cb"] = remember
    try:
        nc = await asyncio.wait_for(nats.connect(**options), settings.connect_timeout)
    except (nats.errors.Error, TimeoutError, OSError) as exc:
        raise _connect_failure(settings, exc, seen) from exc
    nc.options["max_reconnect_attempts"] = -1
    nc.options["reconnect_time_wait"] = 0.25
    return nc


def _connect_failure(
    settings: NatsSettings, exc: BaseException, seen: list[Exception]
) -> SchedulerError:
    """The seam's error for a failed first connect, naming the setting to check."""
    reasons = [exc, *seen]
    if any(isinstance(e, nats.errors.AuthorizationError) or "authorization" in str(e).lower()
           for e in reasons):
        return errors.misconfigured(
            "the scheduler store refused the configured credentials "
            "(check ASTRABOX_NATS_USER/ASTRABOX_NATS_PASSWORD or ASTRABOX_NATS_CREDS)", exc)
    if any(isinstance(e, ssl.SSLCertVerificationError) for e in reasons):
        return errors.misconfigured(
            "the scheduler store's TLS certificate is not trusted "
            "(check ASTRABOX_NATS_TLS_CA and the host name in ASTRABOX_NATS_URL)", exc)
    if any(isinstance(e, ssl.SSLError) for e in reasons):
        return errors.misconfigured(
            "the scheduler store refused the TLS connection; it may require a client "
            "certificate (ASTRABOX_NATS_TLS_CERT and ASTRABOX_NATS_TLS_KEY)", exc)
    return errors.unavailable(
        f"no server answered at the configured address within {settings.connect_timeout:g} s",
        exc)


def check_server(nc: Client) -> None:
    """Refuse servers older than 2.12.3 or without JetStream."""
    version_text = str((nc._server_info or {}).get("version", ""))
    if parse_version(version_text) < MIN_SERVER_VERSION:
        need = ".".join(map(str, MIN_SERVER_VERSION))
        raise SchedulerConfigurationError(
            f"the scheduler store runs server version {version_text or 'unknown'}; "
            f"the nats scheduler needs {need} or newer"
        )
    if not (nc._server_info or {}).get("jetstream", False):
        raise SchedulerConfigurationError(
            "the scheduler store has persistence switched off on the server; "
            "enable it there or choose another provider"
        )


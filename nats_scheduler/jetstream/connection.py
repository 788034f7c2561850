"""Connecting to the scheduler store, and telling why a connection could not be made.

The provider, the command line and the console all connect through :func:`connect`, so a
refused login, an untrusted certificate and an unreachable server are told apart in one
place (:func:`classify_connect_failure`), from EVERY error seen while connecting: the server
answers a wrong password with ``-ERR 'Authorization Violation'`` and closes the socket, so
nats-py often reports the refusal and then ``ConnectionResetError`` within the same
millisecond. Whichever came last, the refusal is the reason.

Only nats-py's public API is used. nats-py 2.16 reads ``max_reconnect_attempts`` on every
attempt but has no public way to change it after connecting, so the client reconnects
forever from the start and the FIRST connect is bounded here instead: by
``connect_timeout``, or sooner by an error that cannot go away by retrying (refused
credentials, TLS).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypedDict, Unpack

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.protocol.parser import AUTHORIZATION_VIOLATION

from ..seam import SchedulerConfigurationError, SchedulerError, SchedulerUnavailable
from ..settings import NatsSettings
from . import errors

ErrorCallback = Callable[[Exception], Awaitable[None]]
Callback = Callable[[], Awaitable[None]]

MIN_SERVER_VERSION = (2, 12, 3)
"""Conditional publishes had clustered-correctness fixes up to 2.12.3 (docs/design.md,
"Minimum server version")."""

RECONNECT_WAIT = 0.25
"""Seconds between attempts at one server, on the first connect and after a drop."""

_REFUSED_TEXTS = (AUTHORIZATION_VIOLATION, "authentication expired")
"""The server's ``-ERR`` texts for a refused login (nats-server ``server/errors.go``).

During the handshake nats-py raises them as a plain ``nats.errors.Error`` carrying the
server's text, not as ``AuthorizationError`` (nats-io/nats.py ``nats/aio/client.py``
``Client._process_connect_init``, "FIXME: ... checking for ErrAuthorization"), so there,
and only there, the text is all there is to recognise.
"""

# =========================================================================== classifying


class FailureKind(Enum):
    """Why a first connect failed, most telling first (see :func:`classify_connect_failure`)."""

    REFUSED_CREDENTIALS = "refused-credentials"
    TLS_UNTRUSTED = "tls-untrusted"
    TLS_REFUSED = "tls-refused"
    UNREACHABLE = "unreachable"


_PRECEDENCE = tuple(FailureKind)
"""A refused login proves the server was reached over working TLS, an untrusted certificate
proves a server answered, and anything else may just be a server that is not up yet."""


@dataclass(frozen=True)
class ConnectFailure:
    """The verdict on one connection attempt: its kind and the error that decided it."""

    kind: FailureKind
    cause: BaseException | None = None

    @property
    def final(self) -> bool:
        """Whether retrying cannot help (wrong credentials or TLS settings)."""
        return self.kind is not FailureKind.UNREACHABLE


def failure_kind(exc: BaseException) -> FailureKind:
    """The kind one error stands for, by its type (by text only where nats-py has no type)."""
    if isinstance(exc, (nats.errors.AuthorizationError, nats.errors.InvalidUserCredentialsError)):
        return FailureKind.REFUSED_CREDENTIALS
    if type(exc) is nats.errors.Error and any(t in str(exc).lower() for t in _REFUSED_TEXTS):
        return FailureKind.REFUSED_CREDENTIALS
    if isinstance(exc, ssl.SSLCertVerificationError):
        return FailureKind.TLS_UNTRUSTED
    if isinstance(exc, (ssl.SSLError, nats.errors.SecureConnFailedError,
                        nats.errors.SecureConnRequiredError, nats.errors.SecureConnWantedError)):
        return FailureKind.TLS_REFUSED
    return FailureKind.UNREACHABLE


def classify_connect_failure(errors: Sequence[BaseException]) -> ConnectFailure:
    """The one verdict for everything seen during an attempt: precedence by kind, not order.

    The cause is the first error of the winning kind; with no error at all the attempt
    simply ran out of time (unreachable).
    """
    kinds = [(failure_kind(e), e) for e in errors]
    for kind in _PRECEDENCE:
        for found, exc in kinds:
            if found is kind:
                return ConnectFailure(kind, exc)
    return ConnectFailure(FailureKind.UNREACHABLE, None)


class ConnectFailed(SchedulerError):
    """A first connect failed; ``failure`` says why, for callers that word it themselves."""

    def __init__(self, message: str, failure: ConnectFailure) -> None:
        super().__init__(message)
        self.failure = failure


class ConnectMisconfigured(ConnectFailed, SchedulerConfigurationError):
    """Credentials or TLS settings the server will not accept: retrying cannot help."""


class ConnectUnavailable(ConnectFailed, SchedulerUnavailable):
    """No server answered in time: it may be down, or the address may be wrong."""


def connect_error(failure: ConnectFailure, message: str) -> ConnectFailed:
    """The seam error class for ``failure`` (configuration vs. unavailable), saying ``message``."""
    cls = ConnectUnavailable if failure.kind is FailureKind.UNREACHABLE else ConnectMisconfigured
    error = cls(message, failure)
    error.__cause__ = failure.cause
    return error


def store_message(failure: ConnectFailure, settings: NatsSettings) -> str:
    """The provider's words for ``failure``, naming the setting to check."""
    if failure.kind is FailureKind.REFUSED_CREDENTIALS:
        return ("the scheduler store refused the configured credentials "
                "(check ASTRABOX_NATS_USER/ASTRABOX_NATS_PASSWORD or ASTRABOX_NATS_CREDS)")
    if failure.kind is FailureKind.TLS_UNTRUSTED:
        return ("the scheduler store's TLS certificate is not trusted "
                "(check ASTRABOX_NATS_TLS_CA and the host name in ASTRABOX_NATS_URL)")
    if failure.kind is FailureKind.TLS_REFUSED:
        return ("the scheduler store refused the TLS connection; it may require a client "
                "certificate (ASTRABOX_NATS_TLS_CERT and ASTRABOX_NATS_TLS_KEY)")
    return ("the scheduler store is unavailable: no server answered at the configured "
            f"address within {settings.connect_timeout:g} s")


# =========================================================================== connecting


def _tls_context(settings: NatsSettings) -> ssl.SSLContext | None:
    if not (settings.tls_ca or settings.tls_cert):
        return None
    context = ssl.create_default_context(cafile=settings.tls_ca)
    if settings.tls_cert and settings.tls_key:
        context.load_cert_chain(settings.tls_cert, settings.tls_key)
    return context


def connect_options(settings: NatsSettings, name: str) -> dict[str, object]:
    """The ``Client.connect`` keyword arguments for these settings (callbacks excluded)."""
    options: dict[str, object] = {
        "servers": settings.servers,
        "name": name,
        "connect_timeout": min(settings.connect_timeout, 2.0),
        "allow_reconnect": True,
        # Forever, also on the first connect: nats-py cannot change it later, and a provider
        # that lost its server must come back by itself. :func:`connect` bounds the first.
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": RECONNECT_WAIT,
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


class _FirstConnect:
    """Gathers every error of the first connect; once connected, passes events on.

    nats-py reports why an attempt failed only to ``error_cb`` and then tries again, so the
    errors are kept here and the attempt ends early on one that retrying cannot fix.
    Closing a client that never connected runs its disconnect callback: it is held back.
    """

    def __init__(self, error_cb: ErrorCallback | None, disconnected_cb: Callback | None) -> None:
        self.errors: list[BaseException] = []
        self.final = asyncio.Event()
        self.connected = False
        self._forward_error = error_cb
        self._forward_drop = disconnected_cb

    async def on_error(self, exc: Exception) -> None:
        if self.connected:
            if self._forward_error is not None:
                await self._forward_error(exc)
            return
        self.errors.append(exc)
        if failure_kind(exc) is not FailureKind.UNREACHABLE:
            self.final.set()

    async def on_disconnected(self) -> None:
        if self.connected and self._forward_drop is not None:
            await self._forward_drop()

    async def run(self, nc: Client, options: dict[str, object], timeout: float) -> bool:
        """Connect ``nc``; False when time ran out or a final error came first."""
        connecting = asyncio.ensure_future(nc.connect(**options))  # type: ignore[arg-type]
        final = asyncio.ensure_future(self.final.wait())
        try:
            await asyncio.wait({connecting, final}, timeout=timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            final.cancel()
            if not connecting.done():
                connecting.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await connecting
        if connecting.cancelled():
            return False
        error = connecting.exception()
        if error is not None:  # nats-py gave up by itself (not with unlimited reconnects)
            self.errors.append(error)
            return False
        self.connected = True
        return True


class Callbacks(TypedDict, total=False):
    """What a caller may hear of its connection once it is up."""

    error_cb: ErrorCallback
    """Every error the connection reports (permission refusals among them: pass a
    ``ViolationLog``'s ``on_error``)."""
    disconnected_cb: Callback
    reconnected_cb: Callback


async def open_connection(
    settings: NatsSettings, name: str, **callbacks: Unpack[Callbacks]
) -> Client | ConnectFailure:
    """One first connect: the connected client, or the verdict on why there is none."""
    attempt = _FirstConnect(callbacks.get("error_cb"), callbacks.get("disconnected_cb"))
    options = connect_options(settings, name)
    options.update(error_cb=attempt.on_error, disconnected_cb=attempt.on_disconnected)
    if "reconnected_cb" in callbacks:
        options["reconnected_cb"] = callbacks["reconnected_cb"]
    nc = Client()
    try:
        if await attempt.run(nc, options, settings.connect_timeout):
            return nc
    except BaseException:
        await _discard(nc)
        raise
    failure = classify_connect_failure(attempt.errors)
    await _discard(nc)
    return failure


async def _discard(nc: Client) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.close(), 2.0)


async def connect(settings: NatsSettings, name: str, **callbacks: Unpack[Callbacks]) -> Client:
    """Connect, failing within ``connect_timeout`` (sooner when the server refuses us).

    Afterwards the connection reconnects forever: a provider that lost its server must come
    back by itself once the server does. The callbacks let a console say so while it waits.
    Raises :class:`ConnectMisconfigured` or :class:`ConnectUnavailable` (seam errors).
    """
    opened = await open_connection(settings, name, **callbacks)
    if isinstance(opened, ConnectFailure):
        raise connect_error(opened, store_message(opened, settings))
    return opened


# =========================================================================== the server


def parse_version(text: str) -> tuple[int, int, int]:
    """``"2.15.1"`` or ``"v2.12.3-beta"`` -> (2, 15, 1); unknown -> (0, 0, 0)."""
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", text or "")
    if not match:
        return (0, 0, 0)
    major, minor, patch = (int(g) for g in match.groups())
    return (major, minor, patch)


def server_version(nc: Client) -> str:
    """The connected server's version (``"2.15.1"``), or ``""`` when it is not known."""
    version = nc.connected_server_version
    try:
        parts = (version.major, version.minor, version.patch)
        extra = version.prerelease
    except ValueError:  # not semantic versioning: nats-py parses lazily and raises
        return ""
    if parts == (0, 0, 0):  # nats-py's "0.0.0-unknown" before/without a connection
        return ""
    return ".".join(map(str, parts)) + (f"-{extra}" if extra else "")


def require_version(version_text: str) -> None:
    """Refuse servers older than 2.12.3 (SchedulerConfigurationError)."""
    if parse_version(version_text) < MIN_SERVER_VERSION:
        need = ".".join(map(str, MIN_SERVER_VERSION))
        raise SchedulerConfigurationError(
            f"the scheduler store runs server version {version_text or 'unknown'}; "
            f"the nats scheduler needs {need} or newer"
        )


def jetstream_off(exc: BaseException) -> bool:
    """Whether a JetStream API error means persistence is off (server or account).

    With JetStream off on the server nobody answers the API: nats-py turns the "no
    responders" status into a bare ``ServiceUnavailableError`` without codes
    (nats-io/nats.py ``nats/js/manager.py`` ``JetStreamManager._api_request``); an account
    without JetStream gets error code 10039. A 503 WITH a code (no leader yet) is transient.
    """
    if isinstance(exc, nats.js.errors.ServiceUnavailableError) and exc.code is None \
            and exc.err_code is None:
        return True
    return errors.is_jetstream_disabled(exc)


async def check_server(nc: Client, js: JetStreamContext) -> None:
    """Refuse servers older than 2.12.3 or without JetStream (SchedulerConfigurationError).

    Other failures of the account query propagate (the store retries transient ones).
    """
    require_version(server_version(nc))
    try:
        await js.account_info()
    except nats.js.errors.APIError as exc:
        if jetstream_off(exc):
            raise SchedulerConfigurationError(
                "the scheduler store has persistence switched off on the server; "
                "enable it there or choose another provider") from exc
        raise

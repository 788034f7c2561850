"""The one place where engine errors become the seam's errors.

Rules (tests/test_errors.py pins the table):

- JetStream API errors are recognised by their numeric ``err_code`` (never by text).
- A failed expected-last-subject-sequence check (10071) is not an error of the provider:
  it is :class:`Conflict`, which the store's callers resolve (read the winner, decide again).
- Connection trouble, timeouts, "no responders" and a stream without a leader are
  *transient*: the store retries them for ``store_retry_seconds`` (long enough to ride out a
  leader election, 4.5-8 s on this machine), then raises :class:`SchedulerUnavailable`.
- Everything raised to AstraBox carries a message in AstraBox's words; the engine's
  exception is only chained as ``__cause__``.
"""

from __future__ import annotations

import asyncio

import nats.errors
import nats.js.errors

from ..names import ERR_NO_MESSAGE_FOUND, ERR_WRONG_LAST_SEQUENCE
from ..seam import SchedulerConfigurationError, SchedulerUnavailable


class Conflict(Exception):
    """Another writer appended to the subject first (JetStream error 10071)."""

    def __init__(self, subject: str) -> None:
        super().__init__(subject)
        self.subject = subject


class NotFound(Exception):
    """The subject has no message (JetStream error 10037 / 404)."""


class PermissionDenied(Exception):
    """The server refused the operation for the connected user."""


TRANSIENT_TYPES: tuple[type[BaseException], ...] = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.NoServersError,
    nats.errors.FlushTimeoutError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.ServerError,
    asyncio.TimeoutError,
    ConnectionError,
    OSError,
)

# JetStream API error codes that mean "try again soon": no leader / not enough peers /
# cluster busy. (nats-server: JSClusterNotAvailErr 10008, JSStreamOfflineErr 10118,
# JSClusterNoPeersErr 10005, JSInsufficientResourcesErr 10023 is NOT transient.)
# JSStreamDuplicateMessageConflict 10158 "duplicate message id is in process": on a
# clustered stream, a message with the same Nats-Msg-Id is still being proposed (another
# replica firing the same due time, or our own resend after a timeout); once it settles,
# the retry gets "duplicate" or 10071 and the store resolves it as usual.
TRANSIENT_ERR_CODES = frozenset({10008, 10118, 10005, 10158})


def is_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` is a failed expected-last-(subject-)sequence check."""
    return isinstance(exc, nats.js.errors.APIError) and exc.err_code == ERR_WRONG_LAST_SEQUENCE


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, nats.js.errors.NotFoundError) or (
        isinstance(exc, nats.js.errors.APIError) and exc.err_code == ERR_NO_MESSAGE_FOUND
    )


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the same operation may succeed once the store recovers."""
    if isinstance(exc, nats.js.errors.APIError) and exc.err_code in TRANSIENT_ERR_CODES:
        return True
    if isinstance(exc, nats.js.errors.APIError) and not isinstance(
        exc, (nats.js.errors.ServiceUnavailableError, nats.js.errors.ServerError)
    ):
        return False
    return isinstance(exc, TRANSIENT_TYPES)


def unavailable(what: str, cause: BaseException | None = None) -> SchedulerUnavailable:
    """SchedulerUnavailable for AstraBox: ``what`` says which operation could not be done."""
    error = SchedulerUnavailable(f"the scheduler store is unavailable: {what}")
    error.__cause__ = cause
    return error


def misconfigured(what: str, cause: BaseException | None = None) -> SchedulerConfigurationError:
    error = SchedulerConfigurationError(what)
    error.__cause__ = cause
    return error

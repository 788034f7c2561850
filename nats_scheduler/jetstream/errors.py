"""The one place where engine errors become the seam's errors.

Rules (tests/test_errors.py pins the table):

- JetStream API errors are recognised by their numeric ``err_code`` (never by text).
- A failed expected-last-subject-sequence check is not an error of the provider: it is
  :class:`Conflict`, which the store's callers resolve (read the winner, decide again). The
  server answers it with 10071, or, on a clustered stream when another conditional publish
  on the same subject is still being proposed, with 10164 (tests/faults/test_faults_cluster.py
  reproduces both on three nodes).
- Connection trouble, timeouts, "no responders" and a stream without a leader are
  *transient*: the store retries them for ``store_retry_seconds`` (long enough to ride out a
  leader election, 4.5-8 s on this machine), then raises :class:`SchedulerUnavailable`.
- Everything raised to AstraBox carries a message in AstraBox's words; the engine's
  exception is only chained as ``__cause__``.
"""

from __future__ import annotations

import asyncio
from enum import IntEnum

import nats.errors
import nats.js.errors

from ..ports.runs import Conflict as Conflict  # raised here, named in the port
from ..seam import SchedulerUnavailable


class EngineError(IntEnum):
    """Every JetStream API error code the provider acts on (nats-server's ``JS...Err``).

    The one table of engine codes: nothing else in the package compares an ``err_code``.
    """

    WRONG_LAST_SEQUENCE = 10071
    """JSStreamWrongLastSequenceErr: an expected-last-(subject-)sequence check failed."""
    WRONG_LAST_SEQUENCE_CONSTANT = 10164
    """JSStreamWrongLastSequenceConstantErr: the same check failed on a clustered stream
    because another conditional publish on the subject is still in flight (being proposed):
    one of two replicas applying the same Schedule at once, or a takeover racing the old
    holder. It is the same conflict as 10071 (nats-py's own KV maps both to
    ``KeyWrongLastSequenceError``), so the caller reads the winner and decides again."""
    NO_MESSAGE_FOUND = 10037
    """JSNoMessageFoundErr: a stream get found no message for the subject."""
    CLUSTER_NOT_AVAILABLE = 10008
    """JSClusterNotAvailErr: no leader right now (an election is running)."""
    STREAM_OFFLINE = 10118
    """JSStreamOfflineErr: the stream's replicas are not reachable yet."""
    CLUSTER_NO_PEERS = 10005
    """JSClusterNoPeersErr: not enough peers for the placement right now."""
    INSUFFICIENT_RESOURCES = 10023
    """JSInsufficientResourcesErr: the server's storage is used up (``max_file_store``)."""
    STORAGE_EXCEEDED = 10047
    """JSStorageResourcesExceededErr: no storage left for what was asked."""
    ACCOUNT_RESOURCES_EXCEEDED = 10002
    """JSAccountResourcesExceededErr: the account's JetStream limits are reached."""
    ATOMIC_BATCH_DISABLED = 10174
    """JSAtomicPublishDisabledErr: an atomic batch sent to a stream without ``allow_atomic``."""
    NOT_ENABLED_FOR_ACCOUNT = 10039
    """JSNotEnabledForAccountErr: the account has no JetStream."""
    NOT_ENABLED = 10076
    """JSNotEnabledErr: the server runs without JetStream."""
    DUPLICATE_MESSAGE_IN_PROCESS = 10158
    """JSStreamDuplicateMessageConflict: a message with the same Nats-Msg-Id is still
    being proposed on a clustered stream (another replica firing the same due time, or our
    own resend after a timeout); once it settles, the retry gets ``duplicate`` or 10071."""


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

TRANSIENT_ERR_CODES = frozenset({
    EngineError.CLUSTER_NOT_AVAILABLE,
    EngineError.STREAM_OFFLINE,
    EngineError.CLUSTER_NO_PEERS,
    EngineError.DUPLICATE_MESSAGE_IN_PROCESS,
})
"""Codes that mean "try again soon"."""

FULL_ERR_CODES = frozenset({
    EngineError.INSUFFICIENT_RESOURCES,
    EngineError.STORAGE_EXCEEDED,
    EngineError.ACCOUNT_RESOURCES_EXCEEDED,
})
"""The store is full. Not transient: space does not come back by itself within a retry
budget, so AstraBox hears at once (and in words that say so), however the server classed
the answer (it sends 10023 as a 503, the class of "temporarily unavailable")."""


CONFLICT_ERR_CODES = frozenset({
    EngineError.WRONG_LAST_SEQUENCE,
    EngineError.WRONG_LAST_SEQUENCE_CONSTANT,
})
"""Codes of a failed expected-last-(subject-)sequence check: :class:`Conflict`."""


def _code(exc: nats.js.errors.APIError) -> int | None:
    """The JetStream error code; None for the client-side errors of nats-py's KV layer
    (``KeyNotFoundError`` and friends are APIErrors the client raises without a code)."""
    return getattr(exc, "err_code", None)


def is_conflict(exc: BaseException) -> bool:
    """Whether ``exc`` is a failed expected-last-(subject-)sequence check."""
    return (isinstance(exc, nats.js.errors.APIError)
            and _code(exc) in CONFLICT_ERR_CODES)


UNANSWERED_TYPES: tuple[type[BaseException], ...] = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.js.errors.NoStreamResponseError,
    asyncio.TimeoutError,
)


def unanswered(exc: BaseException) -> bool:
    """Whether the connected server, though connected, gave the store no usable answer.

    A timeout, nobody answering, or 10008 (no quorum) from one node of a cluster while the
    others may well have a quorum: a node partitioned from the rest answers like this (first
    timeouts, then 10008 once it noticed). Also 10158 (this Msg-Id is still in process): a
    leader cut off from its followers holds the first send's proposal and answers every
    resend so until it steps down, while the others elect a leader that would take it.
    The store then tries another server of the cluster (``Store.retrying``, after 2 s of
    such answers); a leader election looks the same for a few seconds, and switching
    servers then costs nothing but a reconnect.
    """
    if isinstance(exc, UNANSWERED_TYPES):
        return True
    return (isinstance(exc, nats.js.errors.APIError)
            and _code(exc) in (EngineError.CLUSTER_NOT_AVAILABLE,
                               EngineError.DUPLICATE_MESSAGE_IN_PROCESS))


def is_atomic_disabled(exc: BaseException) -> bool:
    """Whether ``exc`` refused an atomic batch because the stream does not take them."""
    return (isinstance(exc, nats.js.errors.APIError)
            and _code(exc) == EngineError.ATOMIC_BATCH_DISABLED)


def is_jetstream_disabled(exc: BaseException) -> bool:
    """Whether ``exc`` says the account or the server has no JetStream (error codes)."""
    return (isinstance(exc, nats.js.errors.APIError) and _code(exc) in (
        EngineError.NOT_ENABLED_FOR_ACCOUNT, EngineError.NOT_ENABLED))


def is_not_found(exc: BaseException) -> bool:
    return isinstance(exc, nats.js.errors.NotFoundError) or (
        isinstance(exc, nats.js.errors.APIError) and _code(exc) == EngineError.NO_MESSAGE_FOUND
    )


def is_full(exc: BaseException | None) -> bool:
    """Whether ``exc`` says the store has no space left (see ``FULL_ERR_CODES``)."""
    return isinstance(exc, nats.js.errors.APIError) and _code(exc) in FULL_ERR_CODES


def is_transient(exc: BaseException) -> bool:
    """Whether retrying the same operation may succeed once the store recovers."""
    if is_full(exc):
        return False
    if isinstance(exc, nats.js.errors.APIError) and _code(exc) in TRANSIENT_ERR_CODES:
        return True
    if isinstance(exc, nats.js.errors.APIError) and not isinstance(
        exc, (nats.js.errors.ServiceUnavailableError, nats.js.errors.ServerError)
    ):
        return False
    return isinstance(exc, TRANSIENT_TYPES)


def unavailable(what: str, cause: BaseException | None = None) -> SchedulerUnavailable:
    """SchedulerUnavailable for AstraBox: ``what`` says which operation could not be done."""
    if is_full(cause):
        error = SchedulerUnavailable(
            f"the scheduler store is full: {what}; nothing already stored is lost, and the "
            "scheduler works again once its storage has room (free space or raise the limit)")
        error.__cause__ = cause
        return error
    error = SchedulerUnavailable(f"the scheduler store is unavailable: {what}")
    error.__cause__ = cause
    return error


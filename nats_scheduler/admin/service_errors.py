"""How the admin service words a failure and checks a request's texts.

Every failure of an endpoint answers ``{"error": {"code", "message"}}`` with a stable
:class:`~.api.ErrorCode`, and the ``Nats-Service-Error``/``-Code`` headers micro clients
look for. The seam's errors already speak AstraBox's words, so their messages pass as they
are; anything unexpected becomes INTERNAL with a message that points at the log, never a
repr.

A request body that does not decode is refused where it is decoded
(``request_checks.decode_request``, ``invalid_request``); a decoding error raised deeper is a
stored record this scheduler could not read, the scheduler's failure and not the operator's:
INTERNAL, logged.
"""

from __future__ import annotations

import msgspec

from ..names import HDR_SERVICE_ERROR, HDR_SERVICE_ERROR_CODE
from ..seam import (
    InvalidSchedule,
    RunNotFound,
    ScheduleCapacityExceeded,
    ScheduleNotFound,
    SchedulerConfigurationError,
    SchedulerError,
    SchedulerUnavailable,
)
from .api import AdminError, ErrorAnswer, ErrorBody, ErrorCode

HTTP_LIKE = {
    ErrorCode.INVALID_REQUEST: "400",
    ErrorCode.FORBIDDEN: "403",
    ErrorCode.NOT_FOUND: "404",
    ErrorCode.CONFLICT: "409",
    ErrorCode.INTERNAL: "500",
    ErrorCode.UNAVAILABLE: "503",
}
"""``Nats-Service-Error-Code`` per error code (micro's convention is HTTP-like numbers)."""

_encoder = msgspec.json.Encoder()


def to_admin_error(exc: BaseException) -> AdminError:
    """The admin error for anything an endpoint raised (messages are already clean)."""
    if isinstance(exc, AdminError):
        return exc
    if isinstance(exc, (ScheduleNotFound, RunNotFound)):
        return AdminError(ErrorCode.NOT_FOUND, str(exc))
    if isinstance(exc, ScheduleCapacityExceeded):
        return AdminError(ErrorCode.CONFLICT, str(exc))
    if isinstance(exc, msgspec.DecodeError):  # before ValueError: it is one
        return AdminError(ErrorCode.INTERNAL, "the scheduler could not read a record it "
                          "stored; see the scheduler's log")
    if isinstance(exc, (InvalidSchedule, ValueError)):
        return AdminError(ErrorCode.INVALID_REQUEST, str(exc))
    if isinstance(exc, (SchedulerUnavailable, SchedulerConfigurationError, SchedulerError)):
        return AdminError(ErrorCode.UNAVAILABLE, str(exc))
    return AdminError(ErrorCode.INTERNAL,
                      "the scheduler could not complete the request; see the scheduler's log")


def error_body(error: AdminError) -> bytes:
    return _encoder.encode(ErrorAnswer(error=ErrorBody(code=error.code, message=error.message,
                                                       retry_after=error.retry_after)))


def error_headers(error: AdminError) -> dict[str, str]:
    """The micro service error headers of an error answer."""
    return {HDR_SERVICE_ERROR: error.message, HDR_SERVICE_ERROR_CODE: HTTP_LIKE[error.code]}


def required(value: str, what: str) -> str:
    """``value`` stripped; INVALID_REQUEST when it is empty (who asks, why, a filter)."""
    if not value or not value.strip():
        raise AdminError(ErrorCode.INVALID_REQUEST, f"{what} must not be empty")
    return value.strip()


def optional_reason(value: str | None) -> str | None:
    """An optional reason stripped, None when blank."""
    return value.strip() if value and value.strip() else None

"""Reading an admin request: its body decoded in one place, then every bound checked.

:func:`decode_request` is the only place a request body is decoded, so only a body that does
not decode is the operator's ``invalid_request`` (a record of the store that does not decode,
deeper down, is the scheduler's own failure: ``service_errors.py``). Its messages say in
plain words which field is unknown, missing or of the wrong kind, and what the endpoint
takes. :func:`check_request` then holds every text, number and instant to the bounds of
``core/validation.py`` (docs/operations.md, "Bounds of a request"), naming the field and the
bound.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import msgspec

from ..core import validation
from .api import AdminError, ErrorCode
from .request_api import (
    BulkAction,
    ExplainRequest,
    LoadRequest,
    OperatorAction,
    ReplayRequest,
    Request,
    RunListRequest,
    RunNowRequest,
    RunRef,
    ScheduleListRequest,
    ScheduleRef,
)

R = TypeVar("R", bound=Request)

SHOWN_NAME_CHARS = 60
"""The most of an unknown field's name a message repeats."""

_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<name>.*)`(?: - at `\$(?P<at>.*)`)?$",
                      re.DOTALL)
_MISSING = re.compile(r"^Object missing required field `(?P<name>.*)`(?: - at `\$(?P<at>.*)`)?$",
                      re.DOTALL)
_KIND = re.compile(r"^(?P<what>.*?)(?: - at `\$\.?(?P<at>.*)`)?$", re.DOTALL)

_WORDS = {"str": "text", "int": "a whole number", "float": "a number", "bool": "true or false",
          "datetime": "an instant with its time zone", "null": "null", "object": "an object",
          "array": "a list"}


@functools.lru_cache(maxsize=64)
def _decoder(kind: type[R]) -> msgspec.json.Decoder[R]:
    return msgspec.json.Decoder(kind)


def decode_request(kind: type[R], data: bytes, endpoint: str) -> R:
    """The request ``data`` carries (an empty body is ``{}``); INVALID_REQUEST in plain words
    when it is not JSON, not an object, or has a field unknown, missing or of the wrong kind."""
    try:
        return _decoder(kind).decode(data or b"{}")
    except msgspec.ValidationError as exc:
        raise AdminError(ErrorCode.INVALID_REQUEST, _plain(str(exc), kind, endpoint)) from None
    except msgspec.DecodeError:
        raise AdminError(ErrorCode.INVALID_REQUEST, "the request is not valid JSON") from None


def _takes(kind: type[Request], endpoint: str) -> str:
    fields = kind.__struct_fields__
    return (f"{endpoint} takes " + ", ".join(fields)) if fields else f"{endpoint} takes no field"


def _plain(message: str, kind: type[Request], endpoint: str) -> str:
    """A msgspec validation message in the words of the admin API."""
    unknown = _UNKNOWN.match(message)
    if unknown:
        name = unknown.group("name")
        shown = name if len(name) <= SHOWN_NAME_CHARS else name[:SHOWN_NAME_CHARS] + "…"
        return (f"the request has a field the scheduler does not know: {shown!r} "
                f"({_takes(kind, endpoint)})")
    missing = _MISSING.match(message)
    if missing:
        return f"the request lacks the field {missing.group('name')!r} ({_takes(kind, endpoint)})"
    kind_match = _KIND.match(message)
    what = kind_match.group("what") if kind_match else message
    at = kind_match.group("at") if kind_match else None
    if at and what.startswith("Invalid RFC3339"):
        return (f"the field {at!r} of the request is not an instant with its time zone "
                "(for example 2026-12-05T14:00:00Z)")
    for name, words in _WORDS.items():
        what = what.replace(f"`{name}`", words).replace(f"`{name} | null`", words)
    what = what.replace("`", "").replace("Expected", "expected")
    if at:
        return f"the field {at!r} of the request is not valid: {what}"
    return f"the request is not valid: {what}"


# ----------------------------------------------------------------------------- bounds


def check_request(request: Request, now: datetime, *, store_now: datetime) -> None:
    """INVALID_REQUEST naming the field and its bound when a text, number or instant of
    ``request`` is out of bounds. ``now``: the answers' clock (explain's window);
    ``store_now``: the store's clock, which a hold's end is judged by."""
    check = _CHECKS.get(type(request))
    if check is None:
        return
    try:
        check(request, now, store_now)
    except ValueError as exc:
        raise AdminError(ErrorCode.INVALID_REQUEST, str(exc)) from None


def _notes(by: str | None, reason: str | None, on_behalf_of: str | None) -> None:
    validation.check_notes(by=by, reason=reason, on_behalf_of=on_behalf_of)


def _schedule_list(req: ScheduleListRequest, _now: datetime, _store: datetime) -> None:
    validation.check_text("filter", req.filter, validation.MAX_FILTER_CHARS)
    validation.check_id_field("after", req.after)


def _schedule_ref(req: ScheduleRef, _now: datetime, _store: datetime) -> None:
    validation.check_id_field("deployment_id", req.deployment_id)


def _operator_action(req: OperatorAction, _now: datetime, store_now: datetime) -> None:
    validation.check_id_field("deployment_id", req.deployment_id)
    _notes(req.by, req.reason, req.on_behalf_of)
    validation.check_hold_end(req.until, store_now)


def _bulk_action(req: BulkAction, _now: datetime, store_now: datetime) -> None:
    validation.check_text("filter", req.filter, validation.MAX_FILTER_CHARS)
    _notes(req.by, req.reason, req.on_behalf_of)
    validation.check_hold_end(req.until, store_now)
    validation.check_id_field("after", req.after)
    validation.check_number("limit", req.limit, 1, validation.MAX_BULK_PAGE)


def _run_list(req: RunListRequest, _now: datetime, _store: datetime) -> None:
    validation.check_id_field("deployment_id", req.deployment_id)
    validation.check_id_field("before", req.before)
    validation.check_number("limit", req.limit, 1, validation.MAX_PAGE)


def _explain(req: ExplainRequest, now: datetime, _store: datetime) -> None:
    validation.check_id_field("deployment_id", req.deployment_id)
    for what, instant in (("since", req.since), ("until", req.until), ("before", req.before)):
        validation.check_instant(what, instant, now, back=validation.EXPLAIN_PAST,
                                 ahead=validation.EXPLAIN_AHEAD)
    validation.check_number("limit", req.limit, 1, validation.MAX_EXPLAIN_PAGE)


def _run_ref(req: RunRef, _now: datetime, _store: datetime) -> None:
    validation.check_id_field("run_id", req.run_id)


def _run_now(req: RunNowRequest, _now: datetime, _store: datetime) -> None:
    validation.check_id_field("deployment_id", req.deployment_id)
    _notes(req.by, req.reason, req.on_behalf_of)
    validation.check_request_id(req.request_id)


def _replay(req: ReplayRequest, _now: datetime, _store: datetime) -> None:
    validation.check_id_field("run_id", req.run_id)
    _notes(req.by, req.reason, req.on_behalf_of)
    validation.check_request_id(req.request_id)


def _load(req: LoadRequest, _now: datetime, _store: datetime) -> None:
    validation.check_number("hours", req.hours, 1, validation.MAX_LOAD_HOURS)


_CHECKS: dict[type[Request], Callable[[Any, datetime, datetime], None]] = {
    ScheduleListRequest: _schedule_list,
    ScheduleRef: _schedule_ref,
    OperatorAction: _operator_action,
    BulkAction: _bulk_action,
    RunListRequest: _run_list,
    ExplainRequest: _explain,
    RunRef: _run_ref,
    RunNowRequest: _run_now,
    ReplayRequest: _replay,
    LoadRequest: _load,
}
"""Request type -> its bounds (a request type without an entry has nothing to bound)."""

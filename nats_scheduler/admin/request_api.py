"""The admin API's request types: what a client may send to each endpoint, and nothing else.

Apart from ``api.py`` (which re-exports them) to keep that module within its size.

Every request type is a :class:`Request`: strict where answers are lenient. A field the
service does not know is refused by name (``forbid_unknown_fields``): a misspelled ``until``
must not turn a hold with an end into an indefinite one. Answers and stored events stay
lenient (a newer service may add fields an older client ignores).

Clients send only the fields they set (``omit_defaults``): a field left at its default is
not on the wire, so a newer client asks an older service in words it knows, unless the
operator uses what only the newer one has (then the older service refuses the field by
name; docs/operations.md, "The admin service"). The bounds of every text, number and instant
are checked after decoding (``admin/request_checks.py``, with the limits of
``core/validation.py``).
"""

from __future__ import annotations

from datetime import datetime

import msgspec


class Request(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True,
              omit_defaults=True):
    """The base of every request type: unknown fields refused, defaults not sent."""


class EmptyRequest(Request, frozen=True, kw_only=True):
    """The body of requests that take no arguments (``{}`` or nothing)."""


class ScheduleListRequest(Request, frozen=True, kw_only=True):
    filter: str | None = None  # substring of deployment ID or name, case-insensitive
    include_deleted: bool = False
    after: str | None = None  # the page after this deployment ID (ScheduleList.next_after)


class ScheduleRef(Request, frozen=True, kw_only=True):
    deployment_id: str


class OperatorAction(Request, frozen=True, kw_only=True):
    deployment_id: str
    by: str
    reason: str
    on_behalf_of: str | None = None
    """Whom the operator says they act for (``--by``): recorded as stated, never as who acted
    (the service records the user the server authenticated, when it can)."""
    until: datetime | None = None
    """A hold only: when it lifts itself (on the store's clock; a due time at or after it
    fires). With its time zone, still to come, at most ``HOLD_HORIZON`` ahead; None: until
    released. A release that names one is refused."""


class BulkAction(Request, frozen=True, kw_only=True):
    filter: str
    by: str
    reason: str
    on_behalf_of: str | None = None
    """Whom the operator says they act for (``--by``): recorded as stated, never as who acted
    (the service records the user the server authenticated, when it can)."""
    until: datetime | None = None
    """A hold only: when the holds lift themselves (as :attr:`OperatorAction.until`)."""
    after: str | None = None
    """Act only on the matching Schedules after this deployment ID (BulkResult.next_after)."""
    limit: int | None = None
    """Act on at most this many (1..1000) and answer with ``next_after`` when more match;
    None: all of them in one answer (how clients older than pages ask)."""


class RunListRequest(Request, frozen=True, kw_only=True):
    deployment_id: str
    limit: int = 50
    before: str | None = None


class ExplainRequest(Request, frozen=True, kw_only=True):
    """A page of the account of due times: of ``[since, until]`` (default: the last 24 h up
    to now), the ``limit`` newest due times before ``before``."""

    deployment_id: str
    since: datetime | None = None
    until: datetime | None = None
    before: datetime | None = None
    limit: int = 500


class RunRef(Request, frozen=True, kw_only=True):
    run_id: str


class RunNowRequest(Request, frozen=True, kw_only=True):
    deployment_id: str
    by: str
    reason: str | None = None
    request_id: str | None = None
    on_behalf_of: str | None = None
    """As for :class:`OperatorAction` (refused while a Run cannot store it apart)."""


class ReplayRequest(Request, frozen=True, kw_only=True):
    run_id: str
    by: str
    reason: str | None = None
    request_id: str | None = None
    on_behalf_of: str | None = None
    """As for :class:`OperatorAction` (refused while a Run cannot store it apart)."""


class LoadRequest(Request, frozen=True, kw_only=True):
    hours: int = 24
    """How far ahead, from now (1..48)."""

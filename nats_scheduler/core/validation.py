"""Checking what AstraBox and operators hand the provider, before anything is written.

Every input check lives here, so an ID, a note or a Schedule is judged the same way
whichever method received it, and every refusal is worded for an API response (it names
the deployment or Run and says what is wrong, never the engine's words). Nothing here does
I/O: the size check takes the server's limit as an argument.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from ..seam import EnqueueRequest, InvalidSchedule, Schedule, Trigger
from . import calendar

MAX_NOTE_CHARS = 1000
"""Longest ``by``/``reason``/``requested_by`` text an operator action or enqueue may carry."""

MAX_EVENT_BYTES = 512 * 1024
"""Refuse Schedules whose events would not fit comfortably in the server's max payload."""

EVENT_HEADROOM_BYTES = 32 * 1024
"""What a Schedule's later events (hold with who and why) and its Runs' events (IDs, times,
holder, requested_by, reason, error) may add to the Schedule's own event. A Schedule is
refused unless its event plus this room fits the server's max payload, so every event it
leads to can be stored (tests/test_hostile_input.py)."""

MAX_PAGE = 1000
"""The seam's largest ``list_runs`` page."""

MAX_ID_LENGTH = 255
"""Longest deployment or Run ID, in characters."""

# The bounds of the admin requests (docs/operations.md, "Bounds of a request"): every text,
# number and instant an operator's request carries has one, so no request can ask for
# unbounded work or store an unbounded note. The notes (by, reason, on behalf of) take
# MAX_NOTE_CHARS and the IDs MAX_ID_LENGTH, as above.

MAX_REQUEST_ID_CHARS = 255
"""Longest idempotency key (``request_id``) of a Run now or Replay."""

MAX_FILTER_CHARS = 255
"""Longest filter text (the Schedule list, a bulk hold or release): IDs are no longer."""

HOLD_HORIZON = timedelta(days=365)
"""The farthest ahead a hold's end (``until``) may be, on the store's clock. A hold meant to
last longer is a hold until released."""

EXPLAIN_PAST = timedelta(days=3653)
"""How far back (ten years) an instant of the account of due times may be."""

EXPLAIN_AHEAD = timedelta(days=3653)
"""How far ahead (ten years) an instant of the account of due times may be: due times to
come are listed as pending, a calendar's next years included (docs/audit.md's example
window is years ahead)."""

MAX_EXPLAIN_PAGE = 1000
"""The most due times one page of the account holds (``limit``)."""

MAX_BULK_PAGE = 1000
"""The most Schedules one page of a bulk hold or release may change (``limit``)."""

MAX_LOAD_HOURS = 48
"""The farthest the load ahead looks (``hours``)."""


def check_id(value: str) -> None:
    """ValueError unless ``value`` can be an ID: not empty, at most :data:`MAX_ID_LENGTH`
    characters, valid Unicode text (no lone surrogates); TypeError when it is no text.

    The rule is the domain's, so it lives here; :func:`names.token`, which turns a usable
    ID into one subject token, applies it first (core imports nothing of NATS naming).
    """
    if not value:
        raise ValueError("an ID must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise ValueError(f"an ID must be at most {MAX_ID_LENGTH} characters")
    if not isinstance(value, str):
        raise TypeError(f"an ID must be text, not {type(value).__name__}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError("an ID must be valid Unicode text") from exc


def usable_id(value: object) -> bool:
    """Whether ``value`` can name a deployment or Run in the store (see :func:`check_id`).

    An ID that is not usable can never have been stored: reads of it find nothing and
    deleting it is a no-op.
    """
    try:
        check_id(value)  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return False
    return True


def check_deployment_id(value: str) -> None:
    """InvalidSchedule when ``value`` cannot name a deployment."""
    try:
        check_id(value)
    except (ValueError, TypeError) as exc:
        raise InvalidSchedule(f"deployment ID {str(value)[:80]!r} is not usable: {exc}") from None


def text_problem(value: str, max_chars: int | None = None) -> str | None:
    """Why ``value`` cannot be stored as event text (lone surrogates, too long), or None."""
    if not value.isascii():  # ASCII always encodes: the usual case costs no encoding
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "is not valid Unicode text"
    if max_chars is not None and len(value) > max_chars:
        return f"is longer than {max_chars} characters"
    return None


def check_text(what: str, value: str | None, max_chars: int) -> None:
    """ValueError naming ``what`` when ``value`` is longer than ``max_chars`` or no valid
    Unicode text (None passes: an absent optional text)."""
    problem = None if value is None else text_problem(value, max_chars)
    if problem is not None:
        raise ValueError(f"{what} {problem}")


def check_notes(**notes: str | None) -> None:
    """ValueError naming the first operator note (who, why) that cannot be stored."""
    for what, value in notes.items():
        check_text(what, value, MAX_NOTE_CHARS)


def check_request_id(value: str | None) -> None:
    """An idempotency key, when given: not empty, at most :data:`MAX_REQUEST_ID_CHARS`."""
    if value is None:
        return
    if not value:
        raise ValueError("request_id must not be empty")
    check_text("request_id", value, MAX_REQUEST_ID_CHARS)


def check_id_field(what: str, value: str | None) -> None:
    """ValueError naming ``what`` unless ``value`` (when given) can be an ID (:func:`check_id`)."""
    if value is None:
        return
    try:
        check_id(value)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{what} is not usable: {exc}") from None


def check_number(what: str, value: int | None, low: int, high: int) -> None:
    """ValueError naming ``what`` unless ``value`` (when given) is an int in ``[low, high]``."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{what} must be between {low} and {high}, not {value}")


def check_instant(what: str, value: datetime | None, now: datetime, *,
                  back: timedelta, ahead: timedelta) -> None:
    """ValueError naming ``what`` unless ``value`` (when given) says its time zone and lies
    between ``back`` before ``now`` and ``ahead`` after it."""
    if value is None:
        return
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must name its time zone (for example 2026-12-05T14:00:00Z)")
    if not now - back <= value <= now + ahead:
        raise ValueError(f"{what} must lie within {back.days} days before now and "
                         f"{ahead.days} days after ({shown_instant(value)} does not)")


def shown_instant(value: datetime) -> str:
    """An instant for a message, in UTC when it can be (``2026-12-05 14:00:00Z``)."""
    try:
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except (OverflowError, ValueError):  # year 1 with a positive offset has no UTC form
        return value.isoformat()


def check_operator_action(by: str, reason: str, on_behalf_of: str | None = None, *,
                          until: datetime | None = None, now: datetime | None = None) -> None:
    """An operator hold or release names who asks and why, in storable text (and whom the
    operator acts for, when stated); a hold's end (``until``) is still to come at ``now``."""
    if not by or not by.strip():
        raise ValueError("an operator action needs the name of who asks for it")
    if not reason or not reason.strip():
        raise ValueError("an operator hold or release needs a reason")
    check_notes(by=by, reason=reason, on_behalf_of=on_behalf_of)
    if now is not None:
        check_hold_end(until, now)


def check_hold_end(until: datetime | None, now: datetime) -> None:
    """A hold's end, when given, is an instant with its time zone, still to come, at most
    :data:`HOLD_HORIZON` ahead (``now``: the store's clock where the hold is decided)."""
    if until is None:
        return
    if until.tzinfo is None or until.utcoffset() is None:
        raise ValueError("the end of a hold (until) must say its time zone (for example "
                         "2026-12-05T14:00:00Z or 2026-12-05T15:00:00+01:00)")
    if until <= now:
        raise ValueError(f"the end of a hold (until) must be later than now "
                         f"({shown_instant(until)} has passed)")
    if until > now + HOLD_HORIZON:
        raise ValueError(f"the end of a hold (until) must be at most {HOLD_HORIZON.days} days "
                         f"ahead ({shown_instant(until)} is later): hold until released "
                         "instead")


def check_schedule(schedule: Schedule) -> None:
    """InvalidSchedule unless the Schedule's ID, texts, cron and time zone can be stored (the
    seam's types check each field's type when the Schedule is built)."""
    check_deployment_id(schedule.deployment_id)
    texts = {"name": schedule.name, "cron": schedule.cron, "timezone": schedule.timezone,
             "target": schedule.payload.target, "prompt": schedule.payload.prompt}
    for what, value in texts.items():
        problem = text_problem(value)
        if problem is not None:
            raise _invalid(schedule, f"its {what} {problem}")
    problem = _calendar_problem(schedule.cron, schedule.timezone)
    if problem is not None:
        raise _invalid(schedule, problem)


def _invalid(schedule: Schedule, problem: str) -> InvalidSchedule:
    return InvalidSchedule(f"schedule of deployment {schedule.deployment_id!r} is invalid: "
                           f"{problem}")


@functools.lru_cache(maxsize=16_384)
def _calendar_problem(cron: str, timezone: str) -> str | None:
    """Why ``calendar.validate`` refuses a cron expression and zone, or None; cached: a
    reconcile checks every Schedule, and a million of them share a few thousand calendars."""
    try:
        calendar.validate(cron, timezone)
    except InvalidSchedule as exc:
        return str(exc)
    return None


def max_schedule_event_bytes(server_max_payload: int | None) -> int:
    """The largest Schedule event whose later events all fit the server's max payload."""
    server_max = server_max_payload or MAX_EVENT_BYTES
    return max(0, min(MAX_EVENT_BYTES, server_max - EVENT_HEADROOM_BYTES))


SCHEDULE_EVENT_FRAME_BYTES = 512
"""More than a ``schedule.applied`` event encodes to with every text empty and a version
below 10**20: its tags, field names, two timestamps and numbers
(tests/test_schedule_size.py pins it)."""

MAX_BYTES_PER_CHAR = 6
"""The most one character of text takes in an event's JSON: ``\\u0001`` for a control
character (UTF-8 takes at most 4 bytes per code point)."""


def surely_fits(schedule: Schedule, actor: str, limit: int) -> bool:
    """Whether ``schedule``'s event is certainly at most ``limit`` bytes, judged by the
    length of its texts alone (no encoding): a bound, so False means "encode and see".

    A reconcile checks every Schedule's size before it writes any; encoding a million
    events to measure them took seconds, and almost every Schedule is far below the limit.
    """
    if not 0 <= schedule.version < 10**20:
        return False
    payload = schedule.payload
    chars = (len(schedule.deployment_id) + len(schedule.name) + len(schedule.cron)
             + len(schedule.timezone) + len(payload.target) + len(payload.prompt)
             + len(actor))
    return SCHEDULE_EVENT_FRAME_BYTES + MAX_BYTES_PER_CHAR * chars <= limit


class ScheduleTooLarge(InvalidSchedule):
    """An InvalidSchedule whose event would not fit: ``reconcile`` counts it apart
    (``too_large``) from a definition that cannot be stored (``invalid``)."""


def check_schedule_size(deployment_id: str, event_bytes: int, limit: int) -> None:
    """ScheduleTooLarge when a Schedule's event is larger than ``limit`` bytes."""
    if event_bytes > limit:
        raise ScheduleTooLarge(
            f"schedule of deployment {deployment_id!r} is too large "
            f"(target and prompt must stay under {limit // 1024} KiB)"
        )


def deployment_ids(schedules: Sequence[Schedule]) -> set[str]:
    """The deployments a reconcile's list gives (fewer than the list when one is given
    twice: that deployment is refused, ``core/refusals.py``)."""
    return {s.deployment_id for s in schedules}


def check_enqueue(request: EnqueueRequest, reason: str | None,
                  on_behalf_of: str | None = None) -> None:
    """Run now or Replay only, with storable notes and a bounded idempotency key."""
    if request.trigger not in (Trigger.RUN_NOW, Trigger.REPLAY):
        raise ValueError("enqueue takes run_now or replay")
    check_notes(requested_by=request.requested_by, reason=reason, on_behalf_of=on_behalf_of)
    check_request_id(request.request_id)


def check_limit(limit: object) -> int:
    """The seam's paging bound: an int from 1 to 1000, else ValueError."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be between 1 and {MAX_PAGE}")
    return limit


def utc(value: datetime, what: str) -> datetime:
    """``value`` in UTC; ValueError for a naive datetime."""
    if value.tzinfo is None:
        raise ValueError(f"{what} must be a timezone-aware datetime")
    return value.astimezone(UTC)


_DURATION = re.compile(r"^([+-]?)(?:(\d{1,9})d)?(?:(\d{1,9})h)?(?:(\d{1,9})m)?$")

_AHEAD_HINT = ("give a time ahead (+30m, +2h, +1d) or an instant with its time zone "
               "(2026-12-05T14:00:00Z)")


def parse_hold_end(text: str, now: datetime) -> datetime:
    """When a hold ends, as an operator types it: an instant in ISO 8601 with its time zone
    (``2026-12-05T14:00:00Z``, ``2026-12-05 15:00+01:00``), or a time from ``now``
    (``+90m``, ``+2h``, ``+1d12h``; the ``+`` may be left out). ValueError, starting with
    the text as typed and saying what is accepted, for anything else, for a time in the past
    (``-5m``) and for one more than :data:`HOLD_HORIZON` ahead. ``now`` is the caller's
    clock; the scheduler checks again on the store's (:func:`check_hold_end`)."""
    value = text.strip()
    match = _DURATION.match(value)
    if match and any(match.groups()[1:]):
        if match.group(1) == "-":
            raise ValueError(f"{value} is in the past: {_AHEAD_HINT}")
        days, hours, minutes = (int(part or 0) for part in match.groups()[1:])
        # nine digits each cannot overflow a timedelta; capped before it meets ``now``
        ahead = timedelta(days=min(days, 2 * HOLD_HORIZON.days), hours=hours, minutes=minutes)
        instant = now + min(ahead, 2 * HOLD_HORIZON)
    else:
        try:
            instant = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{value!r} cannot be read as the end of a hold: "
                             f"{_AHEAD_HINT}") from None
        if instant.tzinfo is None:
            raise ValueError(f"{value} has no time zone: add Z for UTC, or an offset such as "
                             "+01:00")
    if instant <= now:
        raise ValueError(f"{value} is in the past: {_AHEAD_HINT}")
    if instant > now + HOLD_HORIZON:
        raise ValueError(f"{value} is more than {HOLD_HORIZON.days} days ahead: a hold that "
                         "long is a hold until released")
    return instant.astimezone(UTC)

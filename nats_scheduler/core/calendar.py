"""The cron calendar: which instants are due times of a Schedule, and nothing else.

Every replica computes the due times of every Schedule on its own, so they must all get
exactly the same answer: this module is pure (no clock, no I/O beyond reading zone data)
and exact. It parses five-field cron (numbers, names, ranges, steps, lists, ``*``, the
``@daily``-style aliases) with classic day matching: when neither day field starts with
``*`` a day is due if either matches. Anything else is an :class:`InvalidSchedule` whose
message names the field.

DST, as Vixie/ISC cron: a *wall-clock* job (minute and hour fields not starting with ``*``)
whose time falls in a gap fires once at the first instant after it, and in a fold only at
the first occurrence; an *interval-like* job has no due time in a gap and fires at both
passes of a fold.

Zones come from the pinned ``tzdata`` package, never the system's tz database, so two hosts
with different tz releases cannot disagree (:func:`load_zone`). The rules with examples,
how due times are computed, and why croniter is not used: docs/calendar.md.
"""

from __future__ import annotations

import functools
import importlib.resources
import itertools
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from nats_scheduler.seam import InvalidSchedule

__all__ = [
    "dst_transition_near",
    "due_times",
    "is_due_time",
    "load_zone",
    "next_due",
    "upcoming",
    "validate",
]

_DAY = 86_400
_MINUTE = timedelta(minutes=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_ORD = date(1970, 1, 1).toordinal()
_HORIZON = 2922 * _DAY
"""How far ahead next_due/upcoming look: 8 years (2922 days) covers every Feb 29."""
_PROBE = 6 * 3600
"""Offset probe spacing; safe while no zone changes offset twice within six hours."""
_MIN_TS = (datetime(2, 1, 1, tzinfo=UTC) - _EPOCH) // timedelta(seconds=1)
_MAX_TS = (datetime(9998, 12, 1, tzinfo=UTC) - _EPOCH) // timedelta(seconds=1)
"""Working range: keeps every local time (offsets are under a day) inside datetime's range."""

# --------------------------------------------------------------------------- parsing

_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_ALIAS_LIST = ", ".join(_ALIASES)
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_NON_STANDARD = re.compile(r"^(?:\d*L|L.*|\d+W|LW|H.*)$", re.IGNORECASE)
"""Quartz/Jenkins tokens (``L``, ``5L``, ``15W``, ``LW``, ``H``) worth a specific message."""


@dataclass(frozen=True, slots=True)
class _Field:
    """One of the five cron fields: its name in messages, its value range, its names."""

    name: str
    lo: int
    hi: int
    names: tuple[str, ...] = ()
    name_base: int = 0
    max_step: int = 0
    """The largest sensible step (the number of distinct values); 0: the size of the range."""


_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day-of-month", 1, 31),
    _Field("month", 1, 12, _MONTHS, 1),
    _Field("day-of-week", 0, 7, _WEEKDAYS, 0, max_step=7),
)


@dataclass(frozen=True, slots=True, eq=False)
class _Spec:
    """A parsed expression: the allowed values of every field, ready for iteration."""

    times: tuple[int, ...]
    """Every matching time of day, as seconds after midnight, ascending."""
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    """0 = Sunday .. 6 = Saturday (7 already folded onto 0)."""
    day_or: bool
    """Both day fields restricted: a day matches if EITHER matches (classic cron)."""
    interval_like: bool
    """Minute or hour field starts with ``*``: DST gaps skip it and folds repeat it."""


def _quote(text: str) -> str:
    """Echo user input in a message: printable, bounded, in single quotes."""
    clean = "".join(c if c.isprintable() else "?" for c in text)
    return f"'{clean[:40]}...'" if len(clean) > 40 else f"'{clean}'"


def _fail(field: _Field, text: str, problem: str) -> InvalidSchedule:
    return InvalidSchedule(f"{field.name} field {_quote(text)} {problem}")


def _value(field: _Field, token: str, item: str) -> int:
    """One number or name of a field, range-checked."""
    if token.isascii() and token.isdigit():
        if len(token) > 6 or not field.lo <= int(token) <= field.hi:
            raise _fail(field, token, f"is out of range {field.lo}-{field.hi}")
        return int(token)
    if field.names and token.upper() in field.names:
        return field.names.index(token.upper()) + field.name_base
    if _NON_STANDARD.match(token):
        letter = token.lstrip("0123456789")[:1].upper()
        raise _fail(field, item, f"uses '{letter}', which is not standard cron")
    if field.names and token.isascii() and token.isalpha():
        kind = "month" if field.name == "month" else "day"
        hint = f"{field.names[0]}-{field.names[-1]} or {field.lo}-{field.hi}"
        raise _fail(field, token, f"is not a {kind} name (use {hint})")
    raise _fail(
        field,
        item,
        "is not valid; use numbers, ranges (1-5), steps (*/15, 0-30/5), lists (1,15) or '*'",
    )


def _step(field: _Field, text: str, item: str) -> int:
    """The ``/n`` part of an item: from 1 to the number of values the field has.

    Vixie cron accepts larger steps and then matches only the first value, which is never
    what ``*/90`` in the minute field was meant to say, so they are rejected.
    """
    span = field.max_step or field.hi - field.lo + 1
    if not (text.isascii() and text.isdigit()):
        raise _fail(field, item, "has a step that is not a number")
    if len(text) > 6 or not 1 <= int(text) <= span:
        raise _fail(field, item, f"has step {text[:8]}, which is out of range 1-{span}")
    return int(text)


def _item(field: _Field, item: str) -> range:
    """One list entry: ``*``, ``*/n``, ``a``, ``a-b`` or ``a-b/n``."""
    for char in "#?":
        if char in item:
            raise _fail(field, item, f"uses '{char}', which is not standard cron")
    base, slash, step_text = item.partition("/")
    step = _step(field, step_text, item) if slash else 1
    if base == "*":
        return range(field.lo, field.hi + 1, step)
    first, dash, last = base.partition("-")
    if not dash:
        if slash:
            raise _fail(
                field,
                item,
                f"has a step without a range; write '{first}-"
                f"{field.hi}/{step_text}' or '*/{step_text}'",
            )
        value = _value(field, first, item)
        return range(value, value + 1)
    lo, hi = _value(field, first, item), _value(field, last, item)
    if lo > hi:
        raise _fail(field, item, f"is a reversed range ({first} is after {last})")
    return range(lo, hi + 1, step)


def _field_values(field: _Field, text: str) -> frozenset[int]:
    """The set of values a comma-separated field allows."""
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise _fail(field, text, "has an empty list entry")
        values.update(_item(field, item))
    return frozenset(values)


def _split(cron: str) -> list[str]:
    """The five field texts of an expression, with aliases expanded."""
    parts = cron.split()
    if not parts:
        raise InvalidSchedule("cron expression is empty")
    if parts[0].startswith("@"):
        alias = parts[0].lower()
        if alias == "@reboot":
            raise InvalidSchedule(
                f"'@reboot' is not supported; use five fields or one of {_ALIAS_LIST}"
            )
        if alias not in _ALIASES:
            raise InvalidSchedule(
                f"unknown cron alias {_quote(parts[0])}; use one of {_ALIAS_LIST}"
            )
        if len(parts) > 1:
            raise InvalidSchedule(f"cron alias {_quote(parts[0])} must stand alone")
        parts = _ALIASES[alias].split()
    if len(parts) != 5:
        raise InvalidSchedule(
            "cron expression must have 5 fields (minute hour day-of-month "
            f"month day-of-week), got {len(parts)}"
        )
    return parts


def _parse(cron: str) -> _Spec:
    """The parsed expression (cached); raises InvalidSchedule naming the bad field."""
    if not isinstance(cron, str):  # checked before the cache, which needs a hashable key
        raise InvalidSchedule("cron expression must be a string")
    return _parse_cached(cron)


@functools.lru_cache(maxsize=16_384)
def _parse_cached(cron: str) -> _Spec:
    texts = _split(cron)
    fields = zip(_FIELDS, texts, strict=True)
    minute, hour, dom, month, dow = (_field_values(field, text) for field, text in fields)
    times = tuple(h * 3600 + m * 60 for h in sorted(hour) for m in sorted(minute))
    return _Spec(
        times=times,
        days=dom,
        months=month,
        weekdays=frozenset(d % 7 for d in dow),
        day_or=not texts[2].startswith("*") and not texts[4].startswith("*"),
        interval_like=texts[0].startswith("*") or texts[1].startswith("*"),
    )


# --------------------------------------------------------------------------- zones


@functools.lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    """Every IANA name the pinned tzdata package provides (its ``zones`` list)."""
    text = importlib.resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8")
    return frozenset(text.split())


@functools.cache
def _zone_from_tzdata(name: str) -> ZoneInfo:
    resource = importlib.resources.files("tzdata.zoneinfo").joinpath(*name.split("/"))
    with resource.open("rb") as stream:
        return ZoneInfo.from_file(stream, key=name)


def load_zone(timezone: str) -> ZoneInfo:
    """The zone of an IANA name, from the pinned tzdata package; InvalidSchedule otherwise.

    Loaded from tzdata (not ``ZoneInfo(name)``, which prefers the OS database) so every
    replica on every host computes the same due times.
    """
    if not isinstance(timezone, str):
        raise InvalidSchedule("time zone must be a string")
    if timezone not in _zone_names():
        raise InvalidSchedule(f"unknown time zone {_quote(timezone)}")
    return _zone_from_tzdata(timezone)


_Change = tuple[int, int, int]
"""An offset change: (UTC second it takes effect, offset before, offset after), seconds."""


def _offset(zone: ZoneInfo, ts: int) -> int:
    """The zone's exact UTC offset in seconds at UTC second ``ts``."""
    delta = datetime.fromtimestamp(ts, zone).utcoffset()
    assert delta is not None
    return delta.days * _DAY + delta.seconds


def _changes(zone: ZoneInfo, lo: int, lo_off: int, hi: int, hi_off: int) -> list[_Change]:
    """Bisect the offset changes in ``(lo, hi]`` to the second: ``(t, old, new)`` each."""
    found: list[_Change] = []
    while lo_off != hi_off:
        a, b = lo, hi
        while b - a > 1:
            mid = (a + b) // 2
            a, b = (mid, b) if _offset(zone, mid) == lo_off else (a, mid)
        new = _offset(zone, b)
        found.append((b, lo_off, new))
        lo, lo_off = b, new
    return found


@functools.lru_cache(maxsize=16_384)
def _year_transitions(name: str, year: int) -> tuple[_Change, ...]:
    """Offset changes ``(t, old, new)`` with ``t`` in UTC calendar year ``year``."""
    if not 2 <= year <= 9998:
        return ()
    zone = _zone_from_tzdata(name)
    start = (datetime(year, 1, 1, tzinfo=UTC) - _EPOCH) // timedelta(seconds=1)
    end = (datetime(year + 1, 1, 1, tzinfo=UTC) - _EPOCH) // timedelta(seconds=1)
    found: list[_Change] = []
    probe, probe_off = start - 1, _offset(zone, start - 1)
    while probe < end - 1:
        nxt = min(probe + _PROBE, end - 1)
        nxt_off = _offset(zone, nxt)
        found += _changes(zone, probe, probe_off, nxt, nxt_off)
        probe, probe_off = nxt, nxt_off
    return tuple(found)


def _utc_year(ts: int) -> int:
    return date.fromordinal(_EPOCH_ORD + ts // _DAY).year


def _transitions_between(name: str, lo: int, hi: int) -> Iterator[_Change]:
    """Offset changes with ``lo < t < hi``, ascending."""
    for year in range(_utc_year(lo), _utc_year(hi) + 1):
        for change in _year_transitions(name, year):
            if lo < change[0] < hi:
                yield change


def _transition_at_or_before(name: str, ts: int) -> _Change | None:
    """The latest offset change at or before ``ts`` within about a year, or None."""
    year = _utc_year(ts)
    for candidate in (year, year - 1):
        changes = _year_transitions(name, candidate)
        index = bisect_right(changes, (ts, _DAY * 2, 0))
        if index:
            return changes[index - 1]
    return None


# --------------------------------------------------------------------------- iteration


@dataclass(frozen=True, slots=True)
class _Segment:
    """A stretch of UTC time with one offset; all in seconds, offsets floored to minutes.

    ``start`` is the transition that began it (None: none within a year before the search),
    ``prev_offset`` the offset before that transition, ``end`` the next transition (None:
    beyond the search window).
    """

    start: int | None
    end: int | None
    offset: int
    prev_offset: int


def _floor_minute(seconds: int) -> int:
    return seconds - seconds % 60


def _ceil_minute(seconds: int) -> int:
    return -_floor_minute(-seconds)


def _segments(name: str, lo: int, hi: int) -> Iterator[_Segment]:
    """The constant-offset segments covering UTC ``[lo, hi)``, in order.

    Wall minute ``m`` of a segment is the UTC instant ``m - offset``: an offset with seconds
    (local mean time) is floored, so the instant is the whole UTC minute whose local time,
    truncated to the minute, is ``m``.
    """
    previous = _transition_at_or_before(name, lo)
    if previous is None:
        start, offset = None, _floor_minute(_offset(_zone_from_tzdata(name), lo))
        prev_offset = offset
    else:
        start = _ceil_minute(previous[0])
        prev_offset, offset = _floor_minute(previous[1]), _floor_minute(previous[2])
    for t, old, new in _transitions_between(name, lo, hi):
        yield _Segment(start, _ceil_minute(t), offset, prev_offset)
        start, prev_offset, offset = _ceil_minute(t), _floor_minute(old), _floor_minute(new)
    yield _Segment(start, None, offset, prev_offset)


def _days_in_month(year: int, month: int) -> int:
    if month == 12:
        return 31
    return (date(year, month + 1, 1) - date(year, month, 1)).days


@functools.lru_cache(maxsize=65_536)
def _month_days(
    days: frozenset[int], weekdays: frozenset[int], day_or: bool, year: int, month: int
) -> tuple[int, ...]:
    """The days of one month that match the day-of-month/day-of-week rule."""
    first_dow = (date(year, month, 1).weekday() + 1) % 7
    matches = []
    for day in range(1, _days_in_month(year, month) + 1):
        dom_ok, dow_ok = day in days, (first_dow + day - 1) % 7 in weekdays
        if (dom_ok or dow_ok) if day_or else (dom_ok and dow_ok):
            matches.append(day)
    return tuple(matches)


def _matching_days(spec: _Spec, first: int, last: int) -> Iterator[int]:
    """Matching local dates as day numbers (days since 1970-01-01) in ``[first, last]``."""
    start = date.fromordinal(first + _EPOCH_ORD)
    year, month = start.year, start.month
    while year <= 9999:
        month_start = date(year, month, 1).toordinal() - _EPOCH_ORD
        if month_start > last:
            return
        if month in spec.months:
            for day in _month_days(spec.days, spec.weekdays, spec.day_or, year, month):
                number = month_start + day - 1
                if number > last:
                    return
                if number >= first:
                    yield number
        year, month = (year, month + 1) if month < 12 else (year + 1, 1)


def _walls(spec: _Spec, lo: int, hi: int) -> Iterator[int]:
    """Matching wall minutes (naive seconds since 1970-01-01 00:00) in ``[lo, hi)``."""
    if lo >= hi:
        return
    first_day = lo // _DAY
    for day in _matching_days(spec, first_day, (hi - 1) // _DAY):
        base = day * _DAY
        index = bisect_left(spec.times, lo - base) if day == first_day else 0
        for second in itertools.islice(spec.times, index, None):
            if base + second >= hi:
                return
            yield base + second


def _segment_due(spec: _Spec, seg: _Segment, lo: int, hi: int) -> Iterator[int]:
    """Due instants of one segment inside UTC ``[lo, hi)``, ascending, with the DST rules."""
    first = lo if seg.start is None else max(lo, seg.start)
    last = hi if seg.end is None else min(hi, seg.end)
    if first >= last:
        return
    offset, wall_clock = seg.offset, not spec.interval_like
    gap_fire = None
    if wall_clock and seg.start == first and seg.prev_offset < offset:
        gap = _walls(spec, first + seg.prev_offset, first + offset)
        if next(gap, None) is not None:
            gap_fire = first
            yield first
    wall_lo = first + offset
    if wall_clock and seg.start is not None and seg.prev_offset > offset:
        wall_lo = max(wall_lo, seg.start + seg.prev_offset)  # the fold's second pass
    for wall in _walls(spec, wall_lo, last + offset):
        if wall - offset != gap_fire:
            yield wall - offset


def _due(spec: _Spec, name: str, lo: int, hi: int) -> Iterator[int]:
    """All due instants (UTC seconds, whole minutes) in ``[lo, hi)``, ascending."""
    lo, hi = max(lo, _MIN_TS), min(hi, _MAX_TS)
    if lo >= hi:
        return
    for seg in _segments(name, lo, hi):
        yield from _segment_due(spec, seg, lo, hi)


# --------------------------------------------------------------------------- public API


def _seconds(moment: datetime, what: str) -> timedelta:
    """An aware datetime as the exact time since the epoch; naive ones are rejected."""
    if not isinstance(moment, datetime) or moment.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime")
    return moment - _EPOCH


def _minute_after(moment: datetime, what: str) -> int:
    """The first whole UTC minute strictly after ``moment``."""
    return (_seconds(moment, what) // _MINUTE + 1) * 60


def _instant(ts: int) -> datetime:
    return _EPOCH + timedelta(seconds=ts)


def _prepare(cron: str, timezone: str) -> tuple[_Spec, str]:
    """Validate both inputs once per call; the zone is then addressed by its (valid) name."""
    spec = _parse(cron)
    load_zone(timezone)
    return spec, timezone


_MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August",
                "September", "October", "November", "December")
_LONGEST = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
"""Each month's length in its longest year (February: leap years)."""


def _listed(items: list[str], last: str) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {last} {items[-1]}"


def _never_due(cron: str, spec: _Spec) -> str | None:
    """Why an expression has no due time ever, or None.

    Only the day-of-month field can make it so: when the day-of-week field does not add
    days of its own (classic cron adds them only when both day fields are restricted), a
    day beyond every listed month's length never comes (February 30, April 31). Vixie cron
    silently never runs such a line; ``0 0 29 2 *`` is due in leap years.
    """
    if spec.day_or or not spec.days:
        return None
    first = min(spec.days)
    months = sorted(spec.months)
    if any(first <= _LONGEST[m - 1] for m in months):
        return None
    texts = _split(cron)
    days = sorted(spec.days)
    shown = _listed([str(d) for d in days], "and")
    names = _listed([_MONTH_NAMES[m - 1] for m in months], "or")
    verb = "occurs" if len(days) == 1 else "occur"
    return (f"day-of-month field {_quote(texts[2])} with month field {_quote(texts[3])}: "
            f"day{'s' if len(days) > 1 else ''} {shown} never {verb} in {names}, so the "
            "schedule would never be due")


def validate(cron: str, timezone: str) -> None:
    """Raise InvalidSchedule, naming the bad field or zone, unless both are acceptable.

    Also refuses an expression that has no due time at all (``0 0 31 2 *``): stored, it
    would look enabled and never run.
    """
    spec, _ = _prepare(cron, timezone)
    problem = _never_due(cron, spec)
    if problem is not None:
        raise InvalidSchedule(problem)


def due_times(cron: str, timezone: str, start: datetime, end: datetime) -> list[datetime]:
    """Every due time strictly inside ``(start, end)``, ascending, as aware UTC datetimes."""
    spec, name = _prepare(cron, timezone)
    lo = _minute_after(start, "start")
    hi = -(-_seconds(end, "end") // _MINUTE) * 60
    return [_instant(ts) for ts in _due(spec, name, lo, hi)]


def upcoming(cron: str, timezone: str, after: datetime, count: int) -> list[datetime]:
    """The next ``count`` due times strictly after ``after`` (those within 8 years)."""
    if count < 0:
        raise ValueError("count must be >= 0")
    spec, name = _prepare(cron, timezone)
    lo = _minute_after(after, "after")
    return [_instant(ts) for ts in itertools.islice(_due(spec, name, lo, lo + _HORIZON), count)]


def next_due(cron: str, timezone: str, after: datetime) -> datetime | None:
    """The first due time strictly after ``after``, or None if none within 8 years."""
    _prepare(cron, timezone)
    return _next_due_from(cron, timezone, _minute_after(after, "after"))


@functools.lru_cache(maxsize=16_384)
def _next_due_from(cron: str, name: str, lo: int) -> datetime | None:
    """:func:`next_due` from UTC minute ``lo``: cached, because a ticker plans every Schedule.

    At a start every Schedule is planned from the same minute, and after a due time every
    Schedule that fired is planned from it again: Schedules that share a cron expression and
    a zone then share one computation instead of repeating it per Schedule. Pure (the inputs
    were validated), so a cached answer is the answer; the result is immutable.
    """
    ts = next(_due(_parse_cached(cron), name, lo, lo + _HORIZON), None)
    return None if ts is None else _instant(ts)


def is_due_time(cron: str, timezone: str, instant: datetime) -> bool:
    """Whether ``instant`` is exactly one of the due times."""
    spec, name = _prepare(cron, timezone)
    since = _seconds(instant, "instant")
    if since % _MINUTE:
        return False
    ts = since // _MINUTE * 60
    return next(_due(spec, name, ts, ts + 60), None) == ts


def _clock(wall: int, day: int) -> str:
    """``HH:MM`` of a wall second on local day ``day``: ``24:00`` or ``+1d`` past midnight."""
    if wall == (day + 1) * _DAY:
        return "24:00"
    text = f"{wall % _DAY // 3600:02d}:{wall % 3600 // 60:02d}"
    days = wall // _DAY - day
    return f"{text}+{days}d" if days else text


def _transition_label(span: str, gap: bool, cron: str | None) -> str:
    if gap:
        return f"DST gap {span} skipped"
    if cron is None:
        return f"DST fold {span} repeated"
    return f"DST fold {span}: fires {'twice' if _parse(cron).interval_like else 'once'}"


def dst_transition_near(timezone: str, instant: datetime, cron: str | None = None) -> str | None:
    """A short label if the local day of ``instant`` has a clock change, else None.

    For the console, which marks due times on transition days: "DST gap 02:00-03:00
    skipped" or "DST fold 02:00-03:00 repeated"; given ``cron``, the fold label says
    whether that job fires once or twice there.
    """
    zone = load_zone(timezone)
    ts = _seconds(instant, "instant") // timedelta(seconds=1)
    local_day = instant.astimezone(zone).date().toordinal() - _EPOCH_ORD
    labels = []
    for t, old, new in _transitions_between(timezone, ts - 2 * _DAY, ts + 2 * _DAY):
        start, stop = (t + old, t + new) if new > old else (t + new, t + old)
        # A gap marks the day it starts and the day the clock resumes (both differ when a
        # whole day is skipped); a fold marks the days whose wall times repeat.
        last_day = stop // _DAY if new > old else (stop - 1) // _DAY
        if not start // _DAY <= local_day <= last_day:
            continue
        span = f"{_clock(start, start // _DAY)}-{_clock(stop, start // _DAY)}"
        labels.append(_transition_label(span, new > old, cron))
    return "; ".join(labels) or None

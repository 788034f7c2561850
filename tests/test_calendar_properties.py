"""Property tests: the calendar against a brute-force oracle written from the rules alone.

The oracle walks every UTC minute of a short window, converts it to wall time with zoneinfo
and applies the rules of ``nats_scheduler.core.calendar`` literally, with its own tiny field
matcher (it does not import the implementation's parser). Hypothesis generates random valid
five-field expressions and windows of up to three days, most of them centred on a DST
transition of one of the zones below, so gaps and folds are exercised on every run.
Everything is derandomized so CI sees the same examples every time.
"""

from __future__ import annotations

import importlib.resources
import itertools
from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nats_scheduler.core.calendar import due_times, is_due_time, next_due, upcoming, validate
from nats_scheduler.seam import InvalidSchedule

ZONES = (
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Pacific/Chatham",
    "Asia/Kolkata",
    "UTC",
    "Pacific/Apia",
    "Antarctica/Troll",
)
YEARS = (1990, 2060)
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
COMMON = settings(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


# --------------------------------------------------------------------------- the oracle


@cache
def zone(name: str) -> ZoneInfo:
    """The zone straight from the tzdata package, like the implementation promises."""
    path = importlib.resources.files("tzdata.zoneinfo").joinpath(*name.split("/"))
    with path.open("rb") as stream:
        return ZoneInfo.from_file(stream, key=name)


def oracle_set(text: str, lo: int, hi: int, names: tuple[str, ...], base: int) -> set[int]:
    """Expand one (valid) field text literally: lists of *, a, a-b, each with an optional /n."""

    def number(token: str) -> int:
        return int(token) if token.isdigit() else names.index(token.lower()) + base

    out: set[int] = set()
    for part in text.split(","):
        span, _, step = part.partition("/")
        if span == "*":
            first, last = lo, hi
        elif "-" in span:
            first, last = (number(t) for t in span.split("-"))
        else:
            first = last = number(span)
        out.update(range(first, last + 1, int(step or "1")))
    return out


def oracle_matcher(cron: str):
    """A predicate on naive wall datetimes, and whether the job is interval-like."""
    fields = ALIASES.get(cron.strip().lower(), cron).split()
    minutes = oracle_set(fields[0], 0, 59, (), 0)
    hours = oracle_set(fields[1], 0, 23, (), 0)
    doms = oracle_set(fields[2], 1, 31, (), 1)
    months = oracle_set(fields[3], 1, 12, MONTHS, 1)
    dows = {d % 7 for d in oracle_set(fields[4], 0, 7, DAYS, 0)}
    either = not fields[2].startswith("*") and not fields[4].startswith("*")

    def matches(wall: datetime) -> bool:
        if wall.minute not in minutes or wall.hour not in hours or wall.month not in months:
            return False
        dom, dow = wall.day in doms, wall.isoweekday() % 7 in dows
        return (dom or dow) if either else (dom and dow)

    return matches, fields[0].startswith("*") or fields[1].startswith("*")


def oracle(cron: str, name: str, start: datetime, end: datetime) -> list[datetime]:
    """Walk every whole UTC minute in (start, end) and apply the rules literally."""
    matches, interval_like = oracle_matcher(cron)
    tz = zone(name)
    minute = timedelta(minutes=1)
    u = start.astimezone(UTC).replace(second=0, microsecond=0) + minute
    previous_offset = (u - minute).astimezone(tz).utcoffset()
    due = []
    while u < end:
        local = u.astimezone(tz)
        offset = local.utcoffset()
        assert offset is not None and previous_offset is not None
        wall = local.replace(tzinfo=None)
        if interval_like:
            hit = matches(wall)
        else:
            hit = matches(wall) and local.fold == 0
            if offset > previous_offset:  # u is the first instant after a gap
                skipped = wall - (offset - previous_offset)
                while skipped < wall and not hit:
                    hit = matches(skipped)
                    skipped += minute
        if hit:
            due.append(u)
        previous_offset = offset
        u += minute
    return due


# --------------------------------------------------------------------------- strategies


def transitions(name: str) -> list[datetime]:
    """Offset changes of a zone in YEARS, found by daily probing and bisection (test side)."""
    tz, found = zone(name), []
    day = timedelta(days=1)
    t = datetime(YEARS[0], 1, 1, tzinfo=UTC)
    while t.year < YEARS[1]:
        if t.astimezone(tz).utcoffset() != (t + day).astimezone(tz).utcoffset():
            lo, hi = t, t + day
            while hi - lo > timedelta(minutes=1):
                mid = lo + (hi - lo) / 2
                same = mid.astimezone(tz).utcoffset() == lo.astimezone(tz).utcoffset()
                lo, hi = (mid, hi) if same else (lo, mid)
            found.append(hi)
        t += day
    return found


TRANSITIONS = {name: transitions(name) for name in ZONES}


def values(lo: int, hi: int, names: tuple[str, ...] = (), base: int = 0) -> st.SearchStrategy[str]:
    """One value of a field, as a number or (for month/day-of-week) a name in any case."""
    number = st.integers(lo, hi)
    if not names:
        return number.map(str)
    named = st.integers(0, len(names) - 1).flatmap(
        lambda i: st.sampled_from([names[i], names[i].upper(), names[i].capitalize()])
    )
    return st.one_of(number.map(str), named)


def field(
    lo: int,
    hi: int,
    star_weight: int,
    names: tuple[str, ...] = (),
    base: int = 0,
    hot: tuple[int, ...] = (),
) -> st.SearchStrategy[str]:
    """A random valid field: '*' (weighted), '*/n', a value, a range, a stepped range, a list."""
    value = values(lo, hi, names, base)
    if hot:
        value = st.one_of(value, st.sampled_from(hot).map(str))

    def as_number(token: str) -> int:
        return int(token) if token.isdigit() else names.index(token.lower()) + base

    ranged = st.tuples(value, value).map(
        lambda ab: ab if as_number(ab[0]) <= as_number(ab[1]) else (ab[1], ab[0])
    )
    step = st.integers(1, min(hi - lo + 1, 60 if hi > 7 else 7))  # day-of-week: 1-7
    item = st.one_of(
        step.map(lambda n: f"*/{n}"),
        value,
        value,
        ranged.map("-".join),
        st.tuples(ranged, step).map(lambda rs: f"{'-'.join(rs[0])}/{rs[1]}"),
    )
    listed = st.lists(item, min_size=1, max_size=3).map(",".join)
    return st.one_of(*[st.just("*")] * star_weight, listed, item)


HOT_HOURS = (0, 1, 2, 3, 23)
HOT_MINUTES = (0, 15, 30, 45)
minute_fields = field(0, 59, 2, hot=HOT_MINUTES)
day_fields = st.tuples(
    field(1, 31, 4, base=1), field(1, 12, 6, MONTHS, 1), field(0, 7, 4, DAYS, 0, hot=(7,))
).map(" ".join)
aliases = st.sampled_from(sorted(ALIASES)).flatmap(lambda a: st.sampled_from([a, a.upper()]))
five_fields = st.tuples(minute_fields, field(0, 23, 2, hot=HOT_HOURS), day_fields).map(" ".join)
expressions = st.one_of(five_fields, five_fields, five_fields, aliases)


def touching(hours: list[int]) -> st.SearchStrategy[str]:
    """An hour field that includes one of ``hours`` (a value, a list or a range)."""
    hour = st.sampled_from(hours)
    other = st.integers(0, 23)
    return st.one_of(
        hour.map(str),
        st.tuples(hour, other).map(lambda ho: f"{ho[1]},{ho[0]}"),
        st.tuples(hour, st.integers(0, 3)).map(lambda hd: f"{max(hd[0] - hd[1], 0)}-{hd[0]}"),
    )


def transition_hours(name: str, at: datetime) -> list[int]:
    """The local wall hours a transition skips or repeats."""
    tz = zone(name)
    before = (at - timedelta(seconds=1)).astimezone(tz).utcoffset()
    after = at.astimezone(tz).utcoffset()
    assert before is not None and after is not None
    first = (at + min(before, after)).replace(tzinfo=None)
    last = (at + max(before, after)).replace(tzinfo=None) - timedelta(minutes=1)
    return sorted({first.hour, last.hour})


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, str, datetime, datetime]:
    """An expression, a zone and a window of 2 minutes to 3 days.

    Four in five windows contain a transition of the zone; for half of those the hour field
    includes a wall hour the transition skips or repeats, so gap and fold rules really fire.
    """
    name = draw(st.sampled_from(ZONES))
    length = timedelta(minutes=draw(st.integers(2, 72 * 60)))
    if TRANSITIONS[name] and draw(st.integers(0, 4)):
        centre = draw(st.sampled_from(TRANSITIONS[name]))
        start = centre - length * draw(st.integers(1, 99)) / 100
    else:
        start = datetime(YEARS[0], 1, 1, tzinfo=UTC) + timedelta(
            seconds=draw(st.integers(0, (YEARS[1] - YEARS[0]) * 365 * 86_400))
        )
        centre = None
    if centre is not None and draw(st.booleans()):
        days = draw(st.one_of(st.just("* * *"), st.just("* * *"), day_fields))
        hours = touching(transition_hours(name, centre))
        cron = f"{draw(minute_fields)} {draw(hours)} {days}"
    else:
        cron = draw(expressions)
    return cron, name, start, start + length


# --------------------------------------------------------------------------- properties


@settings(COMMON, max_examples=1200)
@given(case=cases())
def test_due_times_match_the_oracle(case: tuple[str, str, datetime, datetime]) -> None:
    cron, name, start, end = case
    due = due_times(cron, name, start, end)
    assert due == oracle(cron, name, start, end)
    assert all(d.tzinfo is UTC and d.second == 0 and d.microsecond == 0 for d in due)

    # next_due walks the same calendar, one due time at a time.
    first = next_due(cron, name, start)
    if due:
        assert first == due[0]
    else:
        assert first is None or first >= end
    for earlier, later in itertools.pairwise(due[:11]):
        assert next_due(cron, name, earlier) == later
    assert upcoming(cron, name, start, len(due)) == due

    # is_due_time agrees on every due time and on the minutes around them.
    for instant in due[:10]:
        assert is_due_time(cron, name, instant)
        assert not is_due_time(cron, name, instant + timedelta(seconds=1))
        before = instant - timedelta(minutes=1)
        if before > start:
            assert is_due_time(cron, name, before) == (before in due)
    probe = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
    if probe < end:
        assert is_due_time(cron, name, probe) == (probe in due)


sparse_expressions = st.tuples(
    values(0, 59),
    field(0, 23, 2, hot=HOT_HOURS),
    field(1, 31, 4, base=1),
    field(1, 12, 6, MONTHS, 1),
    field(0, 7, 4, DAYS, 0),
).map(" ".join)


@settings(COMMON, max_examples=60)
@given(
    cron=sparse_expressions,
    name=st.sampled_from(ZONES),
    start_minute=st.integers(0, (YEARS[1] - YEARS[0]) * 525_600),
    days=st.integers(30, 800),
    cut=st.floats(0.0, 1.0),
)
def test_long_ranges_are_consistent(
    cron: str, name: str, start_minute: int, days: int, cut: float
) -> None:
    """Over months and years: splitting the range never loses or doubles a due time."""
    start = datetime(YEARS[0], 1, 1, tzinfo=UTC) + timedelta(minutes=start_minute, seconds=7)
    end = start + timedelta(days=days)
    middle = start.replace(second=0) + timedelta(minutes=1 + int(cut * days * 1439))
    whole = due_times(cron, name, start, end)
    left = due_times(cron, name, start, middle)
    right = due_times(cron, name, middle - timedelta(seconds=1), end)
    assert whole == left + right
    assert whole == sorted(set(whole))
    assert upcoming(cron, name, start, len(whole) + 1)[: len(whole)] == whole


@settings(COMMON, max_examples=500)
@given(cron=expressions, name=st.sampled_from(ZONES))
def test_validate_accepts_every_generated_expression(cron: str, name: str) -> None:
    """Every generated expression is accepted, unless it is never due (``0 0 30 2 *``):
    then the message says so and the calendar indeed finds no due time."""
    try:
        validate(cron, name)
    except InvalidSchedule as exc:
        assert "never occur" in str(exc), exc
        assert next_due(cron, name, datetime(YEARS[0], 1, 1, tzinfo=UTC)) is None
        return
    validate("  " + cron.replace(" ", "\t ") + " ", name)


garbage = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="0123456789*/-,LW#?H@ abcJANMONxyz\t", max_size=30),
    st.lists(st.text(alphabet="0123456789*/-,", max_size=6), min_size=1, max_size=7).map(" ".join),
)


@settings(COMMON, max_examples=500)
@given(cron=garbage, name=st.one_of(st.sampled_from(ZONES), st.text(max_size=20)))
def test_garbage_is_rejected_only_with_invalid_schedule(cron: str, name: str) -> None:
    try:
        validate(cron, name)
    except InvalidSchedule as error:
        message = str(error)
        assert message and "Error" not in message and "croniter" not in message
        return
    # Whatever validate accepts must also be computable without surprises.
    due_times(cron, name, datetime(2024, 3, 30, tzinfo=UTC), datetime(2024, 3, 31, tzinfo=UTC))


@pytest.mark.parametrize("name", ZONES)
def test_every_zone_has_a_transition_or_none_expected(name: str) -> None:
    """Guards the window strategy: zones with DST really produce transition-centred windows."""
    assert bool(TRANSITIONS[name]) == (name not in ("UTC", "Asia/Kolkata"))

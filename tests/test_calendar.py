"""Table tests for the cron calendar: the nasty cases, spelled out one by one.

Expected due times are written as local wall times (with the UTC offset where a fold makes
the wall time ambiguous), so each row can be checked against a calendar by hand. The
property tests in ``test_calendar_properties.py`` cover the same rules at random.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from nats_scheduler.core.calendar import (
    dst_transition_near,
    due_times,
    is_due_time,
    load_zone,
    next_due,
    upcoming,
    validate,
)
from nats_scheduler.seam import InvalidSchedule

BERLIN = "Europe/Berlin"
LORD_HOWE = "Australia/Lord_Howe"
SANTIAGO = "America/Santiago"
CHATHAM = "Pacific/Chatham"


def utc(text: str) -> datetime:
    """``"2024-03-31 01:00"`` as an aware UTC datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def local(zone: str, text: str) -> datetime:
    """A wall time in ``zone`` as aware UTC; an explicit ``+hh:mm`` picks a fold's pass."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=load_zone(zone))
    return moment.astimezone(UTC)


def walls(zone: str, cron: str, start: str, end: str) -> list[str]:
    """Due times between two local wall times, shown as local ``MM-DD HH:MM+hhmm``."""
    due = due_times(cron, zone, local(zone, start), local(zone, end))
    return [d.astimezone(load_zone(zone)).strftime("%m-%d %H:%M%z") for d in due]


def days(cron: str, start: str, end: str) -> list[str]:
    """Due dates in UTC between two UTC dates, as ``YYYY-MM-DD``."""
    return [d.strftime("%Y-%m-%d") for d in due_times(cron, "UTC", utc(start), utc(end))]


# --------------------------------------------------------------------------- day rules


def test_feb_29_only_in_leap_years() -> None:
    assert days("0 0 29 2 *", "2024-01-01", "2034-01-01") == [
        "2024-02-29",
        "2028-02-29",
        "2032-02-29",
    ]
    assert next_due("0 0 29 2 *", "UTC", utc("2024-03-01")) == utc("2028-02-29")


@pytest.mark.parametrize(("cron", "message"), [
    ("0 0 30 2 *", "day 30 never occurs in February"),
    ("0 0 31 2 *", "day 31 never occurs in February"),
    ("0 0 31 4,6,9,11 *", "day 31 never occurs in April, June, September or November"),
    ("0 0 30,31 2 *", "days 30 and 31 never occur in February"),
    ("0 0 31 2 */2", "day 31 never occurs in February"),  # days ANDed: none to AND with
])
def test_days_that_never_exist_have_no_due_time_and_are_refused(cron: str, message: str
                                                                ) -> None:
    with pytest.raises(InvalidSchedule) as info:
        validate(cron, "UTC")
    assert message in str(info.value)
    assert "day-of-month field" in str(info.value) and "month field" in str(info.value)
    assert next_due(cron, "UTC", utc("2024-01-01")) is None
    assert upcoming(cron, "UTC", utc("2024-01-01"), 3) == []
    assert days(cron, "2024-01-01", "2033-01-01") == []


@pytest.mark.parametrize("cron", ["0 0 29 2 *", "0 0 31 2,3 *", "0 0 31 * *", "0 0 31 2 1",
                                  "0 0 30 2 MON", "0 0 31 FEB SUN-SAT"])
def test_days_that_exist_in_some_listed_month_or_weekday_are_accepted(cron: str) -> None:
    """Leap days, one long month among short ones, or a day-of-week field that adds days of
    its own (both day fields restricted: either matches)."""
    validate(cron, "UTC")
    assert next_due(cron, "UTC", utc("2024-01-01")) is not None


def test_day_31_only_in_long_months() -> None:
    assert days("0 0 31 * *", "2024-01-01", "2025-01-01") == [
        "2024-01-31",
        "2024-03-31",
        "2024-05-31",
        "2024-07-31",
        "2024-08-31",
        "2024-10-31",
        "2024-12-31",
    ]


def test_both_day_fields_restricted_means_either() -> None:
    """``13 * FRI``: every 13th and every Friday (classic cron OR)."""
    assert days("0 0 13 * FRI", "2024-09-01", "2024-11-01") == [
        "2024-09-06",
        "2024-09-13",  # a Friday the 13th fires once
        "2024-09-20",
        "2024-09-27",
        "2024-10-04",
        "2024-10-11",
        "2024-10-13",
        "2024-10-18",
        "2024-10-25",
    ]


def test_star_step_in_day_of_month_is_anded_with_day_of_week() -> None:
    """``*/2`` starts with ``*``: odd days AND Fridays, not odd days OR Fridays."""
    assert days("0 0 */2 * FRI", "2024-09-01", "2024-11-01") == [
        "2024-09-13",
        "2024-09-27",
        "2024-10-11",
        "2024-10-25",
    ]


def test_star_step_in_day_of_week_is_anded_with_day_of_month() -> None:
    """``13 * */2``: the 13th, when it is a Sunday, Tuesday, Thursday or Saturday."""
    assert days("0 0 13 * */2", "2024-01-01", "2025-01-01") == [
        "2024-01-13",
        "2024-02-13",
        "2024-04-13",
        "2024-06-13",
        "2024-07-13",
        "2024-08-13",
        "2024-10-13",
    ]


def test_a_list_starting_with_star_counts_as_star() -> None:
    assert days("0 0 *,13 * MON", "2024-01-01", "2024-02-01") == days(
        "0 0 * * MON", "2024-01-01", "2024-02-01"
    )


@pytest.mark.parametrize(
    ("cron", "same_as"),
    [
        ("5-5 * * * *", "5 * * * *"),
        ("0 5-5 * * *", "0 5 * * *"),
        ("0 0 5-5 * *", "0 0 5 * *"),
        ("0 0 * 5-5 *", "0 0 * 5 *"),
        ("0 0 * * 5-5", "0 0 * * 5"),
        ("0 0 * * FRI-5", "0 0 * * 5"),
        ("0 0 * * 7-7", "0 0 * * 0"),
        ("0 0 * may-5/5 *", "0 0 * 5 *"),
    ],
)
def test_a_one_value_range_is_that_value(cron: str, same_as: str) -> None:
    assert days(cron, "2024-01-01", "2025-01-01") == days(same_as, "2024-01-01", "2025-01-01")
    assert len(days(cron, "2024-01-01", "2024-01-02")) <= 24


@pytest.mark.parametrize("cron", ["0 0 * * 7", "0 0 * * 0", "0 0 * * SUN", "0 0 * * sun,7"])
def test_seven_and_zero_are_sunday(cron: str) -> None:
    assert days(cron, "2024-01-01", "2024-02-01") == [
        "2024-01-07",
        "2024-01-14",
        "2024-01-21",
        "2024-01-28",
    ]


def test_a_range_ending_in_seven_includes_sunday() -> None:
    assert days("0 0 * * 5-7", "2024-01-01", "2024-01-08") == [
        "2024-01-05",
        "2024-01-06",
        "2024-01-07",
    ]


@pytest.mark.parametrize(
    ("cron", "numeric"),
    [
        ("0 12 * JAN-MAR MON-FRI", "0 12 * 1-3 1-5"),
        ("0 12 * jan-mar mon-fri", "0 12 * 1-3 1-5"),
        ("0 12 1 Jan,Jul *", "0 12 1 1,7 *"),
        ("0 12 * * Sat,sun", "0 12 * * 6,0"),
        ("0 12 * feb-dec/2 mon-fri/2", "0 12 * 2-12/2 1-5/2"),
    ],
)
def test_names_in_any_case(cron: str, numeric: str) -> None:
    assert days(cron, "2024-01-01", "2025-01-01") == days(numeric, "2024-01-01", "2025-01-01")


@pytest.mark.parametrize(
    ("alias", "expansion"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@HOURLY", "0 * * * *"),
    ],
)
def test_aliases_expand_to_five_fields(alias: str, expansion: str) -> None:
    for zone in (BERLIN, SANTIAGO):
        start, end = utc("2023-12-15"), utc("2025-01-15")
        assert due_times(alias, zone, start, end) == due_times(expansion, zone, start, end)


def test_hourly_is_interval_like_and_daily_is_wall_clock() -> None:
    assert walls(BERLIN, "@hourly", "2024-10-27 01:00", "2024-10-27 04:00") == [
        "10-27 02:00+0200",
        "10-27 02:00+0100",
        "10-27 03:00+0100",
    ]
    assert walls(SANTIAGO, "@daily", "2024-09-07 12:00", "2024-09-08 12:00") == [
        "09-08 01:00-0300"  # midnight does not exist that day: first instant after the gap
    ]


def test_steps_ranges_and_lists() -> None:
    start, end = utc("2023-12-31 23:59:59"), utc("2024-01-01 01:00")
    minutes = [d.minute for d in due_times("*/20,7,50-55/2 * * * *", "UTC", start, end)]
    assert minutes == [0, 7, 20, 40, 50, 52, 54]
    assert len(due_times("*/5 * * * *", "UTC", utc("2024-01-01"), utc("2024-01-02"))) == 287


# --------------------------------------------------------------------------- time zones


def test_berlin_wall_clock_job_runs_once_on_both_transition_days() -> None:
    assert walls(BERLIN, "30 2 * * *", "2024-03-30 12:00", "2024-04-01 12:00") == [
        "03-31 03:00+0200",  # 02:30 is in the gap: the first instant after it
        "04-01 02:30+0200",
    ]
    assert walls(BERLIN, "30 2 * * *", "2024-10-26 12:00", "2024-10-28 12:00") == [
        "10-27 02:30+0200",  # the first of the two 02:30s only
        "10-28 02:30+0100",
    ]


def test_several_matches_in_one_gap_fire_once() -> None:
    assert walls(BERLIN, "0,20,40 2 * * *", "2024-03-31 00:00", "2024-03-31 05:00") == [
        "03-31 03:00+0200"
    ]
    assert walls(BERLIN, "0 2,3 * * *", "2024-03-31 00:00", "2024-03-31 05:00") == [
        "03-31 03:00+0200"  # the gap's 02:00 and the real 03:00 coincide
    ]


def test_a_gap_counts_only_on_days_the_expression_matches() -> None:
    """2024-03-31 is a Sunday: a Monday 02:30 job has nothing in that gap."""
    assert walls(BERLIN, "30 2 * * MON", "2024-03-30 00:00", "2024-04-02 00:00") == [
        "04-01 02:30+0200"
    ]


def test_interval_job_skips_the_gap_and_doubles_nothing() -> None:
    assert walls(BERLIN, "*/15 * * * *", "2024-03-31 01:20", "2024-03-31 03:20") == [
        "03-31 01:30+0100",
        "03-31 01:45+0100",
        "03-31 03:00+0200",
        "03-31 03:15+0200",
    ]
    assert walls(BERLIN, "*/15 2 * * *", "2024-03-30 00:00", "2024-04-01 00:00") == [
        "03-30 02:00+0100",
        "03-30 02:15+0100",
        "03-30 02:30+0100",
        "03-30 02:45+0100",
    ]


def test_interval_job_fires_at_both_passes_of_the_fold() -> None:
    due = due_times(
        "*/15 * * * *",
        BERLIN,
        utc("2024-10-27 00:00") - timedelta(seconds=1),
        utc("2024-10-27 02:00"),
    )
    assert len(due) == 8  # 02:00-02:45 CEST, then 02:00-02:45 CET
    assert [d.astimezone(load_zone(BERLIN)).strftime("%H:%M%z") for d in due] == [
        "02:00+0200",
        "02:15+0200",
        "02:30+0200",
        "02:45+0200",
        "02:00+0100",
        "02:15+0100",
        "02:30+0100",
        "02:45+0100",
    ]


def test_lord_howe_half_hour_gap() -> None:
    """2024-10-06: 02:00 (+10:30) jumps to 02:30 (+11:00)."""
    assert walls(LORD_HOWE, "15 2 * * *", "2024-10-05 12:00", "2024-10-06 12:00") == [
        "10-06 02:30+1100"
    ]
    assert walls(LORD_HOWE, "45 2 * * *", "2024-10-05 12:00", "2024-10-06 12:00") == [
        "10-06 02:45+1100"
    ]
    assert walls(LORD_HOWE, "*/15 * * * *", "2024-10-06 01:40", "2024-10-06 02:50") == [
        "10-06 01:45+1030",
        "10-06 02:30+1100",
        "10-06 02:45+1100",
    ]


def test_lord_howe_half_hour_fold() -> None:
    """2024-04-07: 02:00 (+11:00) goes back to 01:30 (+10:30)."""
    assert walls(LORD_HOWE, "45 1 * * *", "2024-04-06 12:00", "2024-04-07 12:00") == [
        "04-07 01:45+1100"
    ]
    assert walls(LORD_HOWE, "*/15 * * * *", "2024-04-07 01:10+11:00", "2024-04-07 02:20") == [
        "04-07 01:15+1100",
        "04-07 01:30+1100",
        "04-07 01:45+1100",
        "04-07 01:30+1030",
        "04-07 01:45+1030",
        "04-07 02:00+1030",
        "04-07 02:15+1030",
    ]


def test_santiago_midnight_transitions() -> None:
    """Fold: Saturday 23:00-24:00 twice (2024-04-06). Gap: Sunday 00:00-01:00 (2024-09-08)."""
    assert walls(SANTIAGO, "30 23 * * *", "2024-04-05 12:00", "2024-04-07 12:00") == [
        "04-05 23:30-0300",
        "04-06 23:30-0300",
    ]
    assert walls(SANTIAGO, "*/30 * * * *", "2024-04-06 22:20", "2024-04-07 00:40") == [
        "04-06 22:30-0300",
        "04-06 23:00-0300",
        "04-06 23:30-0300",
        "04-06 23:00-0400",
        "04-06 23:30-0400",
        "04-07 00:00-0400",
        "04-07 00:30-0400",
    ]
    assert walls(SANTIAGO, "0 0 * * *", "2024-09-06 12:00", "2024-09-09 12:00") == [
        "09-07 00:00-0400",
        "09-08 01:00-0300",
        "09-09 00:00-0300",
    ]


def test_chatham_quarter_hour_offsets() -> None:
    """Gap 02:45-03:45 on 2024-09-29; fold 02:45-03:45 on 2024-04-07 (+13:45 -> +12:45)."""
    assert walls(CHATHAM, "0 3 * * *", "2024-09-28 12:00", "2024-09-30 12:00") == [
        "09-29 03:45+1345",
        "09-30 03:00+1345",
    ]
    assert walls(CHATHAM, "50 2 * * *", "2024-04-06 12:00", "2024-04-07 12:00") == [
        "04-07 02:50+1345"
    ]
    assert walls(CHATHAM, "*/30 * * * *", "2024-04-07 02:40+13:45", "2024-04-07 04:10") == [
        "04-07 03:00+1345",
        "04-07 03:30+1345",
        "04-07 03:00+1245",
        "04-07 03:30+1245",
        "04-07 04:00+1245",
    ]


def test_whole_day_skipped_in_samoa() -> None:
    """Pacific/Apia skipped 2011-12-30 entirely; a daily job runs at midnight on the 31st."""
    assert walls("Pacific/Apia", "0 9 * * *", "2011-12-29 00:00", "2012-01-01 00:00") == [
        "12-29 09:00-1000",
        "12-31 00:00+1400",
        "12-31 09:00+1400",
    ]


def test_kolkata_half_hour_offset_and_utc() -> None:
    assert due_times("0 9 * * *", "Asia/Kolkata", utc("2024-06-01"), utc("2024-06-02")) == [
        utc("2024-06-01 03:30")
    ]
    assert due_times("30 5 * * *", "Asia/Kolkata", utc("2024-06-01"), utc("2024-06-03")) == [
        utc("2024-06-02 00:00")  # the 00:00 UTC at the start is outside the window
    ]
    assert due_times("30 5 * * *", "UTC", utc("2024-06-01"), utc("2024-06-02")) == [
        utc("2024-06-01 05:30")
    ]


# --------------------------------------------------------------------------- the API


def test_due_times_are_strictly_inside_the_window_and_utc() -> None:
    start, end = utc("2024-01-01 10:00"), utc("2024-01-01 10:15")
    due = due_times("*/5 * * * *", "UTC", start, end)
    assert due == [utc("2024-01-01 10:05"), utc("2024-01-01 10:10")]
    assert all(d.tzinfo is UTC for d in due)
    shifted = timezone(timedelta(hours=2))
    assert due_times("*/5 * * * *", BERLIN, start.astimezone(shifted), end) == due
    assert due_times("*/5 * * * *", "UTC", end, start) == []


def test_next_due_upcoming_and_is_due_time() -> None:
    after = utc("2024-01-01 10:02:30")
    assert next_due("*/5 * * * *", "UTC", after) == utc("2024-01-01 10:05")
    assert next_due("*/5 * * * *", "UTC", utc("2024-01-01 10:05")) == utc("2024-01-01 10:10")
    assert upcoming("0 9 * * MON-FRI", "UTC", utc("2024-01-05 12:00"), 2) == [
        utc("2024-01-08 09:00"),
        utc("2024-01-09 09:00"),
    ]
    assert upcoming("0 9 * * *", "UTC", after, 0) == []
    assert is_due_time("30 2 * * *", BERLIN, local(BERLIN, "2024-03-31 03:00"))
    assert not is_due_time("30 2 * * *", BERLIN, local(BERLIN, "2024-10-27 02:30+01:00"))
    assert is_due_time("30 2 * * *", BERLIN, local(BERLIN, "2024-10-27 02:30+02:00"))
    assert not is_due_time("*/5 * * * *", "UTC", utc("2024-01-01 10:05:01"))


def test_naive_datetimes_are_rejected() -> None:
    naive = datetime(2024, 1, 1)
    aware = utc("2024-01-02")
    with pytest.raises(ValueError, match="start must be a timezone-aware datetime"):
        due_times("* * * * *", "UTC", naive, aware)
    with pytest.raises(ValueError, match="end must be a timezone-aware datetime"):
        due_times("* * * * *", "UTC", aware, naive)
    with pytest.raises(ValueError, match="timezone-aware"):
        next_due("* * * * *", "UTC", naive)
    with pytest.raises(ValueError, match="timezone-aware"):
        upcoming("* * * * *", "UTC", naive, 1)
    with pytest.raises(ValueError, match="timezone-aware"):
        is_due_time("* * * * *", "UTC", naive)
    with pytest.raises(ValueError, match="timezone-aware"):
        dst_transition_near("UTC", naive)


def test_transition_labels() -> None:
    assert dst_transition_near(BERLIN, local(BERLIN, "2024-03-31 12:00")) == (
        "DST gap 02:00-03:00 skipped"
    )
    assert dst_transition_near(BERLIN, local(BERLIN, "2024-10-27 00:10")) == (
        "DST fold 02:00-03:00 repeated"
    )
    assert dst_transition_near(BERLIN, utc("2024-10-27 12:00"), "30 2 * * *") == (
        "DST fold 02:00-03:00: fires once"
    )
    assert dst_transition_near(BERLIN, utc("2024-10-27 12:00"), "*/5 * * * *") == (
        "DST fold 02:00-03:00: fires twice"
    )
    assert dst_transition_near(SANTIAGO, local(SANTIAGO, "2024-04-06 08:00")) == (
        "DST fold 23:00-24:00 repeated"
    )
    assert dst_transition_near(LORD_HOWE, local(LORD_HOWE, "2024-10-06 09:00")) == (
        "DST gap 02:00-02:30 skipped"
    )
    assert dst_transition_near(BERLIN, local(BERLIN, "2024-03-30 23:59")) is None
    assert dst_transition_near(BERLIN, local(BERLIN, "2024-04-01 00:00")) is None
    assert dst_transition_near("UTC", utc("2024-03-31 01:00")) is None


def test_next_due_is_fast() -> None:
    """The ticker calls next_due after every fire for up to 100,000 Schedules."""
    cases = [("*/5 * * * *", "UTC"), ("0 9 * * MON-FRI", BERLIN), ("30 2 * * *", BERLIN)]
    after = utc("2026-05-01 12:03")
    for cron, zone in cases:
        next_due(cron, zone, after)  # warm the caches
        began = time.perf_counter()
        for minute in range(1000):
            next_due(cron, zone, after + timedelta(minutes=minute))
        assert time.perf_counter() - began < 1.0, cron  # far under 1 ms per call


def test_next_due_shared_by_schedules_depends_on_zone_and_minute_only() -> None:
    """next_due is cached for Schedules planned together: a zone or a minute later is another
    answer, seconds within one minute are the same answer (checked against ``upcoming``)."""
    for zone in ("UTC", BERLIN, CHATHAM, "Asia/Kolkata"):
        for after in (utc("2024-10-27 00:59:59"), utc("2024-10-27 01:00"),
                      utc("2024-10-27 01:00:30"), utc("2024-10-27 01:01")):
            assert next_due("0,1 * * * *", zone, after) == upcoming(
                "0,1 * * * *", zone, after, 1)[0], (zone, after)
    assert next_due("0 9 * * *", "UTC", utc("2024-01-01")) != next_due(
        "0 9 * * *", BERLIN, utc("2024-01-01"))


def test_years_of_due_times_are_generated_not_walked() -> None:
    began = time.perf_counter()
    due = due_times("*/5 * * * *", BERLIN, utc("2020-01-01"), utc("2024-01-01"))
    assert time.perf_counter() - began < 5.0
    assert len(due) == (366 + 3 * 365) * 288 - 1  # the window excludes 2020-01-01 00:00


# --------------------------------------------------------------------------- validation

ALIASES = "@yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly"
FIVE = "cron expression must have 5 fields (minute hour day-of-month month day-of-week)"


@pytest.mark.parametrize(
    ("cron", "message"),
    [
        ("61 * * * *", "minute field '61' is out of range 0-59"),
        ("1,61 * * * *", "minute field '61' is out of range 0-59"),
        ("0 24 * * *", "hour field '24' is out of range 0-23"),
        ("0 0 0 * *", "day-of-month field '0' is out of range 1-31"),
        ("0 0 32 * *", "day-of-month field '32' is out of range 1-31"),
        ("0 0 * 13 *", "month field '13' is out of range 1-12"),
        ("0 0 * * 8", "day-of-week field '8' is out of range 0-7"),
        ("0 0 0 * * *", f"{FIVE}, got 6"),
        ("* * * *", f"{FIVE}, got 4"),
        ("@reboot", f"'@reboot' is not supported; use five fields or one of {ALIASES}"),
        ("@every", f"unknown cron alias '@every'; use one of {ALIASES}"),
        ("@daily 5", "cron alias '@daily' must stand alone"),
        ("0 0 L * *", "day-of-month field 'L' uses 'L', which is not standard cron"),
        ("0 0 15W * *", "day-of-month field '15W' uses 'W', which is not standard cron"),
        ("0 0 * * 5L", "day-of-week field '5L' uses 'L', which is not standard cron"),
        ("0 0 * * 5#2", "day-of-week field '5#2' uses '#', which is not standard cron"),
        ("0 0 ? * *", "day-of-month field '?' uses '?', which is not standard cron"),
        ("H * * * *", "minute field 'H' uses 'H', which is not standard cron"),
        ("*/0 * * * *", "minute field '*/0' has step 0, which is out of range 1-60"),
        ("0 0 * * */8", "day-of-week field '*/8' has step 8, which is out of range 1-7"),
        ("*/90 * * * *", "minute field '*/90' has step 90, which is out of range 1-60"),
        ("5-1 * * * *", "minute field '5-1' is a reversed range (5 is after 1)"),
        ("0 0 * * sat-sun", "day-of-week field 'sat-sun' is a reversed range (sat is after sun)"),
        (
            "5/10 * * * *",
            "minute field '5/10' has a step without a range; write '5-59/10' or '*/10'",
        ),
        ("1,,2 * * * *", "minute field '1,,2' has an empty list entry"),
        ("0 0 * JANUARY *", "month field 'JANUARY' is not a month name (use JAN-DEC or 1-12)"),
        ("0 0 * * MONDAY", "day-of-week field 'MONDAY' is not a day name (use SUN-SAT or 0-7)"),
        (
            "-1 * * * *",
            "minute field '-1' is not valid; use numbers, ranges (1-5), steps (*/15, 0-30/5), "
            "lists (1,15) or '*'",
        ),
        ("", "cron expression is empty"),
        ("   ", "cron expression is empty"),
    ],
)
def test_invalid_expressions_name_the_field(cron: str, message: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        validate(cron, "UTC")
    assert str(caught.value) == message


@pytest.mark.parametrize(
    "zone",
    [
        "Mars/Olympus",
        "",
        "../etc",
        "localtime",
        "Europe/ Berlin",
        "europe/berlin",
        "/usr/share/zoneinfo/UTC",
        "Europe/Berlin/",
        "Europe/../UTC",
        "zone.tab",
    ],
)
def test_unknown_time_zones(zone: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        validate("* * * * *", zone)
    assert str(caught.value) == f"unknown time zone '{zone}'"


def test_messages_are_clean_for_an_api_response() -> None:
    with pytest.raises(InvalidSchedule) as caught:
        validate("0 0 * * *", "Europe/Berlin\n")
    assert str(caught.value) == "unknown time zone 'Europe/Berlin?'"
    with pytest.raises(InvalidSchedule) as caught:
        validate("9" * 5000 + " * * * *", "UTC")
    assert str(caught.value) == f"minute field '{'9' * 40}...' is out of range 0-59"


@pytest.mark.parametrize(
    "cron",
    [
        "* * * * *",
        "0 0 * * 0-7",
        "00 09 * * 01",
        "*/60 * * * *",
        "0 0 1-31/2 * *",
        " 0\t9 * * MON-FRI ",
        "0 0 * jan-dec sun-sat",
        "@DAILY",
    ],
)
def test_valid_expressions(cron: str) -> None:
    validate(cron, "Europe/Berlin")


def test_zones_come_from_the_tzdata_package() -> None:
    """With no system tz database at all, zones still load (from tzdata) and compute."""
    script = textwrap.dedent(
        """
        import zoneinfo
        zoneinfo.reset_tzpath(to=[])
        from datetime import UTC, datetime
        from nats_scheduler.core.calendar import load_zone, next_due
        assert zoneinfo.ZoneInfo("Australia/Lord_Howe").key == "Australia/Lord_Howe"
        assert load_zone("Australia/Lord_Howe").key == "Australia/Lord_Howe"
        due = next_due("15 2 * * *", "Australia/Lord_Howe", datetime(2024, 10, 5, tzinfo=UTC))
        print(due.isoformat())
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2024-10-05T15:30:00+00:00"


# --------------------------------------------------------------------------- croniter

CRONITER_7_0_0_DISAGREES = [
    # (cron, zone, start UTC, end UTC, what croniter 7.0.0 returns, what is right)
    (
        "30 2 * * *",
        BERLIN,
        "2024-10-26 12:00",
        "2024-10-27 12:00",
        ["2024-10-27 00:30", "2024-10-27 01:30"],
        ["2024-10-27 00:30"],
    ),
    (
        "30 1 * * *",
        "America/New_York",
        "2024-11-02 12:00",
        "2024-11-03 12:00",
        ["2024-11-03 05:30", "2024-11-03 06:30"],
        ["2024-11-03 05:30"],
    ),
    (
        "45 1 * * *",
        LORD_HOWE,
        "2024-04-06 00:00",
        "2024-04-07 00:00",
        ["2024-04-06 14:45", "2024-04-06 15:15"],
        ["2024-04-06 14:45"],
    ),
    (
        "30 23 * * *",
        SANTIAGO,
        "2024-04-06 12:00",
        "2024-04-07 12:00",
        ["2024-04-07 02:30", "2024-04-07 03:30"],
        ["2024-04-07 02:30"],
    ),
    (
        "0 3 * * *",
        CHATHAM,
        "2024-04-06 00:00",
        "2024-04-07 00:00",
        ["2024-04-06 13:15", "2024-04-06 14:15"],
        ["2024-04-06 13:15"],
    ),
    (
        "0 0 */2 * FRI",
        "UTC",
        "2024-09-01 00:00",
        "2024-09-08 00:00",
        ["2024-09-03 00:00", "2024-09-05 00:00", "2024-09-06 00:00", "2024-09-07 00:00"],
        [],
    ),
    (
        "0 0 13 * */2",
        "UTC",
        "2024-01-01 00:00",
        "2024-01-05 00:00",
        ["2024-01-02 00:00", "2024-01-04 00:00"],
        [],
    ),
    (
        "5-5 * * * *",
        "UTC",
        "2024-01-01 00:00",
        "2024-01-01 00:04",
        ["2024-01-01 00:01", "2024-01-01 00:02", "2024-01-01 00:03"],
        [],
    ),
    (
        "0 0 * * 7-7",
        "UTC",
        "2024-01-05 00:00",
        "2024-01-08 00:00",
        ["2024-01-06 00:00", "2024-01-07 00:00"],
        ["2024-01-07 00:00"],
    ),
    ("*/15 2 * * *", BERLIN, "2024-03-30 12:00", "2024-03-31 12:00", ["2024-03-31 01:00"], []),
    (
        "0 1,2 * * *",
        "Antarctica/Troll",
        "2024-10-26 12:00",
        "2024-10-27 12:00",
        ["2024-10-26 23:00", "2024-10-27 00:00", "2024-10-27 01:00", "2024-10-27 02:00"],
        ["2024-10-26 23:00", "2024-10-27 00:00"],
    ),
    ("*/10 20,0 * * *", SANTIAGO, "2024-09-08 03:30", "2024-09-08 04:30", ["2024-09-08 04:00"], []),
    (
        "*/20 1,2 * * *",
        LORD_HOWE,
        "2024-04-06 14:30",
        "2024-04-06 15:45",
        ["2024-04-06 14:40", "2024-04-06 15:30"],
        ["2024-04-06 14:40", "2024-04-06 15:10", "2024-04-06 15:30"],
    ),
    (
        "* 2 * * *",
        CHATHAM,
        "2024-04-06 13:10",
        "2024-04-06 14:02",
        ["2024-04-06 13:11", "2024-04-06 13:12", "2024-04-06 13:13", "2024-04-06 13:14"],
        [
            "2024-04-06 13:11",
            "2024-04-06 13:12",
            "2024-04-06 13:13",
            "2024-04-06 13:14",
            "2024-04-06 14:00",
            "2024-04-06 14:01",
        ],
    ),
]


@pytest.mark.parametrize(
    ("cron", "zone", "start", "end", "croniter_says", "right"), CRONITER_7_0_0_DISAGREES
)
def test_croniter_7_0_0_disagreements(
    cron: str, zone: str, start: str, end: str, croniter_says: list[str], right: list[str]
) -> None:
    """Why the calendar does not use croniter: each row is a wrong due time it computes.

    Our side must always hold. croniter's side is pinned for the version evaluated (7.0.0)
    and skipped on any other, where the table is worth re-checking by hand.
    """
    assert due_times(cron, zone, utc(start), utc(end)) == [utc(t) for t in right]
    if importlib.metadata.version("croniter") != "7.0.0":
        pytest.skip("croniter's answers were recorded for 7.0.0")
    from croniter import croniter

    iterator = croniter(cron, utc(start).astimezone(load_zone(zone)))
    produced = []
    while (due := iterator.get_next(datetime)) < utc(end):
        produced.append(due.astimezone(UTC))
    assert produced == [utc(t) for t in croniter_says]


@pytest.mark.parametrize(
    "cron",
    [
        "5/10 * * * *",
        "5-1 * * * *",
        "0 0 * * sat-sun",
        "0 0 L * *",
        "0 0 15W * *",
        "0 0 * * 5#2",
        "0 0 ? * *",
        "* * * * * *",
        "*/5 * * * * 30",
        "*/90 * * * *",
    ],
)
def test_croniter_7_0_0_accepts_what_standard_cron_rejects(cron: str) -> None:
    with pytest.raises(InvalidSchedule):
        validate(cron, "UTC")
    if importlib.metadata.version("croniter") != "7.0.0":
        pytest.skip("croniter's answers were recorded for 7.0.0")
    from croniter import croniter

    assert croniter.is_valid(cron)


def test_croniter_7_0_0_raises_where_there_is_simply_no_due_time() -> None:
    assert next_due("0 0 30 2 *", "UTC", utc("2024-01-01")) is None
    if importlib.metadata.version("croniter") != "7.0.0":
        pytest.skip("croniter's answers were recorded for 7.0.0")
    from croniter import CroniterBadDateError, croniter

    with pytest.raises(CroniterBadDateError):
        croniter("0 0 30 2 *", utc("2024-01-01")).get_next(datetime)

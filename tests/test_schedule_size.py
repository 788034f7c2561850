"""The size bound a reconcile judges Schedules by before it encodes any of them.

``validation.surely_fits`` says a Schedule's event fits without encoding it (a reconcile of
a million Schedules checks every size before it writes anything). It is a bound, so it may
only ever err towards "encode and see": for any texts (control characters, non-ASCII,
astral code points, quotes) and any version, a Schedule it passes encodes within the limit.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nats_scheduler.core import schedulecore, validation
from nats_scheduler.core.events import encode
from nats_scheduler.seam import RunPayload, Schedule

NOW = datetime(2030, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
TEXT = st.text(st.characters(codec="utf-8"), max_size=60)
SETTINGS = settings(deadline=None, derandomize=True, database=None, max_examples=300,
                    suppress_health_check=list(HealthCheck))


def encoded_size(schedule: Schedule, actor: str) -> int:
    event = schedulecore.decide_apply(None, schedule, now=NOW, actor=actor)
    assert event is not None
    return len(encode(event))


@SETTINGS
@given(dep=TEXT.filter(bool), name=TEXT, cron=TEXT, tz=TEXT, target=TEXT, prompt=TEXT,
       actor=TEXT, version=st.integers(min_value=0, max_value=10**20 - 1),
       slack=st.integers(min_value=0, max_value=400))
def test_a_schedule_the_bound_passes_encodes_within_the_limit(
        dep: str, name: str, cron: str, tz: str, target: str, prompt: str, actor: str,
        version: int, slack: int) -> None:
    schedule = Schedule(dep, name, cron, tz, True, RunPayload(target, prompt), version)
    size = encoded_size(schedule, actor)
    for limit in (size - 1, size + slack):
        if validation.surely_fits(schedule, actor, limit):
            assert size <= limit


def test_the_frame_is_more_than_an_empty_event() -> None:
    empty = Schedule("x", "", "", "", True, RunPayload("", ""), 10**20 - 1)
    assert encoded_size(empty, "") < validation.SCHEDULE_EVENT_FRAME_BYTES
    assert validation.surely_fits(empty, "", validation.SCHEDULE_EVENT_FRAME_BYTES + 6)
    assert not validation.surely_fits(Schedule("x", "", "", "", True, RunPayload("", ""),
                                               10**20), "", 10**9), "a longer version: encode"

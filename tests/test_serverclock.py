"""The estimate of the store's clock (pure) and the clock that fires by it (no server)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from nats_scheduler.clock import ManualClock, ServerClock, SystemClock
from nats_scheduler.core.serverclock import (
    DRIFT,
    FRESH_SECONDS,
    HOLD_SECONDS,
    MAX_ROUND_TRIP,
    OffsetEstimator,
    Sample,
)
from tests.harness.clocks import ManualElapsed

pytestmark = pytest.mark.anyio

SERVER = 1_800_000_000.0
"""The server's clock (seconds since the epoch) at elapsed time 0 in these tests."""


def sample(sent: float, acked: float, *, stamped: float | None = None,
           host_ahead: float = 0.0) -> Sample:
    """A write sent and acked at these elapsed times, stamped by the server in between."""
    stamped = (sent + acked) / 2 if stamped is None else stamped
    return Sample(sent=sent, acked=acked, server=SERVER + stamped,
                  wall_sent=SERVER + sent + host_ahead, wall_acked=SERVER + acked + host_ahead)


def test_one_sample_bounds_the_offset_by_its_round_trip() -> None:
    estimator = OffsetEstimator()
    estimate = estimator.add(sample(10.0, 10.004, stamped=10.003, host_ahead=20.0))
    assert estimate is not None
    assert estimate.low == pytest.approx(SERVER - 0.001, abs=1e-6)   # stamp - acked
    assert estimate.high == pytest.approx(SERVER + 0.003, abs=1e-6)  # stamp - sent
    assert estimate.width == pytest.approx(0.004, abs=1e-6)
    # the lower bound never runs ahead of the server: true server time at 10.004 >= stamp
    assert estimate.server_low(10.004) <= SERVER + 10.004
    assert estimate.wall_offset == pytest.approx(20.0 - 0.001, abs=1e-6)
    assert estimate.wall_error == pytest.approx(0.002, abs=1e-6)


def test_samples_intersect_and_a_contradicting_one_restarts_the_window() -> None:
    estimator = OffsetEstimator()
    estimator.add(sample(1.0, 1.010, stamped=1.001))   # [S-0.009, S+0.001]
    estimate = estimator.add(sample(2.0, 2.010, stamped=2.009))  # [S-0.001, S+0.009]
    assert estimate is not None
    assert (estimate.low, estimate.high) == (pytest.approx(SERVER - 0.001, abs=1e-6),
                                             pytest.approx(SERVER + 0.001, abs=1e-6))
    # the server's clock stepped back 5 s: disjoint from the window, only the new one holds
    estimate = estimator.add(sample(3.0, 3.002, stamped=3.001 - 5.0))
    assert estimate is not None and estimator.resets == 1
    assert estimate.low == pytest.approx(SERVER - 5.001, abs=1e-6)


def test_a_slow_round_trip_is_kept_a_too_slow_one_not_and_an_old_estimate_is_not_fresh() -> None:
    estimator = OffsetEstimator()
    assert estimator.add(sample(0.0, MAX_ROUND_TRIP + 0.5)) is None  # too wide to keep
    slow = estimator.add(sample(1.0, 3.0))  # 2 s on a loaded store: true, only wide
    assert slow is not None and slow.width == pytest.approx(2.0)
    estimator.add(sample(4.0, 4.002))
    assert estimator.estimate(4.002 + FRESH_SECONDS) is not None
    assert estimator.estimate(4.003 + FRESH_SECONDS) is None


def test_a_held_estimate_lowers_its_bound_for_drift() -> None:
    estimator = OffsetEstimator()
    estimate = estimator.add(sample(10.0, 10.002, stamped=10.001))
    assert estimate is not None
    fresh = estimate.server_low(10.002)
    assert estimate.server_low(10.002 + 1000.0) == pytest.approx(
        fresh + 1000.0 - DRIFT * 1000.0, abs=1e-6)


def test_old_samples_leave_the_window() -> None:
    estimator = OffsetEstimator(window=60.0)
    estimator.add(sample(0.0, 0.002, stamped=0.0019))  # tight, but will be forgotten
    estimate = estimator.add(sample(70.0, 70.010))
    assert estimate is not None and estimate.width == pytest.approx(0.010, abs=1e-6)


def test_the_server_clock_reads_the_lower_bound_holds_it_and_then_the_host_clock() -> None:
    host = ManualClock(datetime.fromtimestamp(SERVER + 100.0 + 20.0, UTC))  # 20 s fast
    elapsed = ManualElapsed()
    clock = ServerClock(host, elapsed=elapsed)
    assert clock.now() == host.now() and clock.offset() is None  # no estimate yet
    clock.observe(sample(100.0, 100.002, host_ahead=20.0))
    elapsed.value = 101.0
    # a second after the sample: the lower bound, less a second's drift
    assert clock.now().timestamp() == pytest.approx(SERVER + 101.0 - 0.001 - DRIFT, abs=1e-5)
    assert clock.offset() == pytest.approx(20.0, abs=1e-5)
    # the host's clock is stepped: the server clock does not move with it
    host.advance(300)
    assert clock.now().timestamp() == pytest.approx(SERVER + 101.0 - 0.001 - DRIFT, abs=1e-5)
    # no sample for longer than FRESH_SECONDS (the store slow, a watch lost): the offset is
    # no longer shown, but the clock still goes by the store's, a little behind for drift,
    # never by the host's (320 s ahead by now)
    elapsed.value = 100.002 + FRESH_SECONDS + 1
    assert clock.estimate() is None and clock.offset() is None
    held = clock.now().timestamp()
    assert held <= SERVER + elapsed.value and held > SERVER + elapsed.value - 0.01
    # past HOLD_SECONDS without a sample: the host's clock, as before
    elapsed.value = 100.002 + HOLD_SECONDS + 1
    assert clock.now() == host.now()


def test_only_clocks_that_follow_the_wall_clock_are_wrapped() -> None:
    assert isinstance(ServerClock.wrap(SystemClock()), ServerClock)
    manual = ManualClock()
    assert ServerClock.wrap(manual) is manual  # tests keep driving time by hand
    wrapped = ServerClock.wrap(SystemClock())
    assert ServerClock.wrap(wrapped) is wrapped


async def test_a_sleeper_wakes_by_the_server_clock_not_the_host_clock() -> None:
    """A host 20 s fast: its sleeper for an instant 0.3 s ahead on the server's clock wakes
    after about 0.3 s of elapsed time, not at once; and never before the instant."""
    loop = asyncio.get_running_loop()
    host = _OffsetSystemClock(20.0)
    clock = ServerClock(host, elapsed=loop.time)
    began = loop.time()
    now_wall = datetime.now(UTC).timestamp()
    clock.observe(Sample(sent=began, acked=began, server=now_wall,
                         wall_sent=now_wall + 20.0, wall_acked=now_wall + 20.0))
    instant = clock.now() + timedelta(seconds=0.3)
    assert host.now() > instant  # by the host's clock it is long past
    await asyncio.wait_for(clock.sleep_until(instant), 5.0)
    assert clock.now() >= instant
    assert loop.time() - began >= 0.29


class _OffsetSystemClock(SystemClock):
    def __init__(self, ahead: float) -> None:
        self._ahead = timedelta(seconds=ahead)

    def now(self) -> datetime:
        return super().now() + self._ahead


def test_a_sample_that_moves_the_server_clock_on_moves_a_sleepers_wake_up() -> None:
    """On virtual time, naps longer than the wait: a sleeper for an instant 10 s ahead is
    woken when a later sample shows the server's clock 4 s further on (at 6 s, not 10 s),
    and at once by a sample that puts the instant in the past."""
    from nats_scheduler.simulation.loop import VirtualTimeLoop

    loop = VirtualTimeLoop()
    host = ManualClock(datetime.fromtimestamp(SERVER, UTC))
    clock = ServerClock(host, elapsed=loop.time, nap=60.0)
    woke: list[float] = []

    def server_at(elapsed: float, ahead: float) -> Sample:
        return Sample(sent=elapsed, acked=elapsed, server=SERVER + elapsed + ahead,
                      wall_sent=SERVER + elapsed, wall_acked=SERVER + elapsed)

    async def sleep(instant: datetime) -> None:
        await clock.sleep_until(instant)
        woke.append(loop.time())

    async def scenario() -> None:
        clock.observe(server_at(0.0, 0.0))
        start = clock.now()
        first = asyncio.ensure_future(sleep(start + timedelta(seconds=10)))
        second = asyncio.ensure_future(sleep(start + timedelta(seconds=30)))
        await asyncio.sleep(2.0)
        clock.observe(server_at(2.0, 4.0))  # a step: the window starts again
        await first
        assert woke == [pytest.approx(6.0, abs=0.01)]
        await asyncio.sleep(1.0)
        assert not second.done()
        clock.observe(server_at(loop.time(), 30.0))  # the server 30 s on: past the second's instant
        await second
        assert woke[1] == pytest.approx(woke[0] + 1.0)

    try:
        loop.run_until_complete(scenario())
    finally:
        loop.close()


def test_each_estimate_is_the_intersection_of_the_window_it_keeps() -> None:
    """Bounds kept from one sample to the next are the ones the window's samples give, read
    afresh: over steps of the server's clock (resets), old samples leaving the window, wide
    and refused round trips."""
    import random

    rng = random.Random(5)
    estimator = OffsetEstimator(window=60.0)
    elapsed, offset = 0.0, 0.0
    for _ in range(2000):
        elapsed += rng.choice([0.5, 5.0, 20.0])
        if rng.random() < 0.02:
            offset += rng.uniform(-30.0, 30.0)  # a step: the window starts again
        trip = rng.choice([0.001, 0.004, 0.5, MAX_ROUND_TRIP + 1.0])
        stamped = elapsed + rng.uniform(0.0, trip)
        estimate = estimator.add(sample(elapsed, elapsed + trip, stamped=stamped + offset))
        kept = list(estimator._samples)
        assert estimate is not None
        assert estimate.low == max(s.server - s.acked for s in kept)
        assert estimate.high == min(s.server - s.sent for s in kept)
        assert all(kept[-1].acked - s.acked <= 60.0 for s in kept)
        elapsed += trip
    assert estimator.resets > 10

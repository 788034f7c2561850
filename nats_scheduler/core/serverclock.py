"""Where the store's clock stands, from this replica's writes: an offset with an error bound.

JetStream stamps every stored message with the server's time. A replica that notes its own
elapsed time (``time.monotonic``) just before a write and just after its acknowledgement,
and then learns the stamp ``ts`` the server gave that write, knows the server stamped it at
some instant between the two notes. So ``server - elapsed`` was in
``[ts - acked, ts - sent]``: an interval as wide as the round trip, whatever the network's
asymmetry. Every sample gives one such interval; while neither clock is stepped the true
value lies in all of them, so their intersection bounds it more tightly than any one.

The estimate is of the server's clock against *elapsed* time, not against this host's wall
clock: a wall-clock step (NTP, an operator) then changes nothing, and the host's wall clock
is only compared with the server's for display (:attr:`Estimate.wall_offset`).

Pure: no I/O, no clock of its own; :mod:`nats_scheduler.clock` (``ServerClock``) reads it,
:mod:`nats_scheduler.jetstream.presence` feeds it from the beat it already writes.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

SAMPLE_WINDOW_SECONDS = 60.0
"""Samples older than this (elapsed) are forgotten: two clocks' rates differ by up to a few
hundred parts per million, so an interval this old may be off by some 20 ms."""

FRESH_SECONDS = 10.0
"""An estimate whose newest sample is older than this is not shown (the offset people and
metrics read is None): it is not known how the host clock moved since."""

HOLD_SECONDS = 3600.0
"""An estimate is still fired by this long after its newest sample, its lower bound lowered by
``DRIFT`` per second of age. A replica whose samples stop (the store slow, a leader election,
its presence watch lost) must not go back to its host clock: a host clock minutes off, or
stepped meanwhile, would then fire due times that early (a soak found Runs 16 s early that
way). Late by at most ``DRIFT`` x the age instead (1.8 s after an hour); past it, the host
clock."""

DRIFT = 500e-6
"""How far elapsed time and the server's clock may drift apart per second: quartz is within
100 ppm, a clock NTP slews within 500 ppm."""

MAX_ROUND_TRIP = 5.0
"""A sample whose round trip exceeds this is not kept. A wide sample is still true (its bound
only makes the firing late by its width, never early), and on a loaded store a put may take
seconds: refusing it would leave the replica without an estimate exactly then."""


@dataclass(frozen=True)
class Sample:
    """One write: elapsed time before it and after its ack, the server's stamp, the wall
    clock's reading at both ends (seconds since the epoch)."""

    sent: float
    acked: float
    server: float
    wall_sent: float
    wall_acked: float


@dataclass(frozen=True)
class Estimate:
    """``server time - elapsed`` lies in ``[low, high]``; measured at elapsed ``at``.

    ``wall_offset``: this host's wall clock minus the server's (positive: the host runs
    ahead), the middle of its interval, give or take ``wall_error``.
    """

    low: float
    high: float
    at: float
    wall_offset: float
    wall_error: float

    @property
    def width(self) -> float:
        """How far :meth:`server_low` may lag the server's true time (seconds)."""
        return self.high - self.low

    def server_low(self, elapsed: float) -> float:
        """The earliest the server's clock can read at ``elapsed`` (seconds since the epoch):
        lowered by ``DRIFT`` for every second since the newest sample."""
        return elapsed + self.low - DRIFT * max(0.0, elapsed - self.at)


class OffsetEstimator:
    """Keeps the samples of the last minute and their tightest consistent bound."""

    def __init__(self, *, window: float = SAMPLE_WINDOW_SECONDS,
                 max_round_trip: float = MAX_ROUND_TRIP) -> None:
        self._window = window
        self._max_round_trip = max_round_trip
        self._samples: deque[Sample] = deque()
        self._estimate: Estimate | None = None
        self.resets = 0
        """Samples that contradicted the earlier ones (a clock stepped): the window restarted."""

    def add(self, sample: Sample) -> Estimate | None:
        """Take one sample; returns the estimate after it (None while there is none)."""
        if not sample.sent <= sample.acked or sample.acked - sample.sent > self._max_round_trip:
            return self._estimate
        while self._samples and sample.acked - self._samples[0].acked > self._window:
            self._samples.popleft()
        low, high = sample.server - sample.acked, sample.server - sample.sent
        current = self._bounds()
        if current is not None and (low > current[1] or high < current[0]):
            # disjoint from what the window says: the server's clock (or this host's
            # elapsed time, after a suspend) stepped; only the new sample is true now
            self._samples.clear()
            self.resets += 1
            current = None
        self._samples.append(sample)
        bounds = (low, high) if current is None else (max(current[0], low),
                                                      min(current[1], high))
        self._estimate = self._compute(bounds)
        return self._estimate

    def _bounds(self) -> tuple[float, float] | None:
        if not self._samples:
            return None
        return (max(s.server - s.acked for s in self._samples),
                min(s.server - s.sent for s in self._samples))

    def _compute(self, bounds: tuple[float, float]) -> Estimate:
        """The estimate from the window's ``bounds`` (its samples' intersection, the
        newest sample included: computed by :meth:`add` from the window's before it)."""
        low, high = bounds
        newest = self._samples[-1]
        # the wall clock's own offset from the server, from the newest sample alone: the
        # wall clock may be stepped at any time, so older samples say nothing about it now
        wall_low = newest.wall_sent - newest.server
        wall_high = newest.wall_acked - newest.server
        return Estimate(low=low, high=high, at=newest.acked,
                        wall_offset=(wall_low + wall_high) / 2,
                        wall_error=(wall_high - wall_low) / 2)

    def estimate(self, elapsed: float, *, fresh: float = FRESH_SECONDS) -> Estimate | None:
        """The estimate if its newest sample is at most ``fresh`` seconds old, else None."""
        estimate = self._estimate
        if estimate is None or elapsed - estimate.at > fresh:
            return None
        return estimate

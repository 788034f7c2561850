"""Which provider replicas are alive: one key per replica in a KV bucket, re-put every beat.

The firing path names one owner per due time among the live replicas
(``core/ownership.py``), so it needs a cheap, local answer to "who is alive?". Each replica
puts its own key (``Names.replica_key``: its identity, escaped) when it starts and again
every ``beat_seconds``, deletes it when it stops, and watches the whole bucket into memory.

A replica is live while its key's last put is within ``3 * beat_seconds`` of the newest put
this process has seen in the bucket, both judged by the SERVER's timestamps on them: what
the store says, compared only with what the store said (no replica's clock is involved, and
replicas' wall clocks may be skewed). A deleted key leaves at once; a killed replica's key
stops changing, and it drops out once the others' puts (ours among them, every beat) are a
window newer; the bucket's ``max_age`` then removes the key itself. The keys found when the
watch starts, some left by a replica that died a while ago, are judged the same way.

Never by this process's own time-outs or its own elapsed time: a replica whose event loop
is busy (a reconcile of a million Schedules, a long pause) reads the others' puts late, but
it reads them in order, and until it has read newer ones it has no reason to think anybody
stopped. While it cannot read the bucket at all it keeps the last membership it saw; the
owner patience (``runtime/ticker.py``) covers an owner that really stopped meanwhile.

The beat is also this replica's measure of the store's clock (``core/serverclock.py``): the
elapsed time just before each put and just after its ack, and the server's timestamp on that
very message (it comes back through the watch, so the measure costs no extra request), give
one :class:`~nats_scheduler.core.serverclock.Sample` to ``on_sample`` per beat.

The value under the key also says whether the replica serves the admin service
(``admin_service``: :class:`~nats_scheduler.core.serving.Serving`, read at each beat), so
``status``, the console and the doctor count a replica that fires but does not serve
(``jetstream/replica_reads.py`` reads the bucket for them).

Presence only decides who fires first; it is never what makes a Run unique (the store's
conditional create is). So a wrong answer costs work, not correctness, and this process
always counts itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar

import msgspec
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from ..clock import Clock, SystemClock
from ..core.serverclock import MAX_ROUND_TRIP, Sample
from ..core.serving import Serving
from ..names import Names
from ..ports.replicas import RegistryRefused
from ..tasks import cancel_and_wait
from .errors import is_transient
from .foreign import ForeignLog, ForeignMessage, reason_of

log = logging.getLogger(__name__)

_V = TypeVar("_V")

WINDOW_BEATS = 3
"""A replica is live while its key was put within this many beats."""

BEAT_SECONDS = 1.0
"""Seconds between two puts of a replica's key (what readers of the bucket assume too)."""

MAX_AGE_SECONDS = 30.0
"""The bucket's ``max_age`` at least: dead replicas' keys vanish from ``nats kv ls``."""

STOP_TIMEOUT = 2.0
"""Seconds ``stop()`` gives each server operation: a stop never hangs on a dead server."""

REPLAY_WAIT = 2.0
"""Seconds ``start()`` waits for the watch's replay: the live replicas and the first sample
of the server's clock are then known before the ticker plans anything."""

PENDING_BEATS = 8
"""Beats whose timings (or server stamps) wait for their other half, at most."""


class PresenceValue(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The JSON under a replica's key (``nats kv get P_REPLICAS <identity>``), for people
    and for ``status``: put every beat by every replica, so it stays a few dozen bytes."""

    identity: str
    started_at: datetime
    beat_at: datetime
    admin_service: str | None = None
    """Whether it serves the admin service: a :class:`~nats_scheduler.core.serving.Serving`
    word ("serving", or why not). None (absent) from replicas older than the field."""


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(PresenceValue).decode


def replica_value_on(names: Names, subject: str, data: bytes) -> PresenceValue:
    """The value stored on a replica key's ``subject``, or :class:`ForeignMessage`: not a
    replica's value, or one announcing another replica than the key names."""
    try:
        value = _decode(data)
    except (msgspec.DecodeError, ValueError) as exc:
        raise ForeignMessage(subject, reason_of(exc)) from exc
    try:
        filed = names.replica_subject(value.identity)
    except ValueError:
        filed = ""
    if filed != subject:
        raise ForeignMessage(subject, f"replica {value.identity!r} under another key")
    return value


def bucket_config(names: Names, *, replicas: int, beat_seconds: float) -> KeyValueConfig:
    """The replicas bucket: latest value only, on disk, replicated like the other streams."""
    return KeyValueConfig(
        bucket=names.replicas_bucket,
        description="AstraBox scheduler: one key per live provider replica, re-put every beat",
        history=1,
        storage=StorageType.FILE,
        replicas=replicas,
        ttl=max(MAX_AGE_SECONDS, 10 * beat_seconds),
    )


async def _bind_or_create(js: JetStreamContext, config: KeyValueConfig) -> KeyValue:
    assert config.bucket is not None
    try:
        return await js.key_value(config.bucket)
    except nats.js.errors.BucketNotFoundError:
        try:
            return await js.create_key_value(config)
        except nats.js.errors.BadRequestError:
            return await js.key_value(config.bucket)  # another replica created it first


def _server_seconds(created: object) -> float | None:
    """An entry's server timestamp in seconds (nats-py gives a datetime), if it has one."""
    if isinstance(created, datetime):
        return created.timestamp()
    if isinstance(created, int | float):
        return float(created) / 1e9
    return None


class Presence:
    """This replica's key in the replicas bucket, and the live replicas it sees there."""

    def __init__(self, kv: KeyValue, names: Names, identity: str, *, beat_seconds: float,
                 elapsed: Callable[[], float],
                 on_sample: Callable[[Sample], None] | None = None,
                 wall: Callable[[], float] = time.time, clock: Clock | None = None,
                 foreign: ForeignLog | None = None,
                 serving: Callable[[], Serving] | None = None) -> None:
        self._kv = kv
        self.foreign = foreign or ForeignLog()
        """Where the foreign values met under replica keys are counted (jetstream/foreign.py)."""
        self._serving = serving
        """Read at each beat: whether this replica serves the admin service now."""
        self._clock: Clock = clock or SystemClock()
        """Where the times in our value come from (for people only: liveness is elapsed time)."""
        self._names = names
        self._key = names.replica_key(identity)
        self._elapsed = elapsed
        self.identity = identity
        self.beat_seconds = beat_seconds
        self.window = WINDOW_BEATS * beat_seconds
        self._started_at = self._clock.now()
        self._seen: dict[str, tuple[str, float]] = {}
        """key -> (identity, the server's timestamp of its latest put, seconds)."""
        self._newest = -math.inf
        """The newest server timestamp of a put seen in the bucket (ours included)."""
        self._live: tuple[str, ...] = (identity,)
        self._dirty = False
        self._watcher: KeyValue.KeyWatcher | None = None
        self._joined = False
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._on_sample = on_sample
        self._wall = wall
        self._timings: dict[int, tuple[float, float, float, float]] = {}
        """revision of our put -> (elapsed sent, elapsed acked, wall sent, wall acked)."""
        self._stamps: dict[int, float] = {}
        """revision of our put -> the server's timestamp, when the watch saw it first."""
        self._replayed = asyncio.Event()
        self.failed_beats = 0
        """Beats whose put failed or went unanswered (retried at the next beat)."""

    @classmethod
    async def open(cls, js: JetStreamContext, names: Names, identity: str, *, replicas: int,
                   beat_seconds: float = BEAT_SECONDS,
                   elapsed: Callable[[], float] = time.monotonic,
                   on_sample: Callable[[Sample], None] | None = None,
                   wall: Callable[[], float] = time.time,
                   clock: Clock | None = None, foreign: ForeignLog | None = None,
                   serving: Callable[[], Serving] | None = None) -> Presence:
        """Bind the replicas bucket (creating it on first use); :meth:`start` to join.

        ``on_sample`` gets one sample of the server's clock per beat, timed on ``elapsed``
        (and ``wall``, the host's clock, for the offset people read). ``clock`` (the
        runtime's; the system clock by default) stamps the ``started_at`` and ``beat_at``
        people read in the key's value; ``serving`` its ``admin_service`` word."""
        config = bucket_config(names, replicas=replicas, beat_seconds=beat_seconds)
        kv = await _bind_or_create(js, config)
        return cls(kv, names, identity, beat_seconds=beat_seconds, elapsed=elapsed,
                   on_sample=on_sample, wall=wall, clock=clock, foreign=foreign,
                   serving=serving)

    # ------------------------------------------------------------------ joining and leaving

    async def start(self) -> None:
        """Put our key, watch the bucket, and beat. Raises if the server refuses the first put.

        Returns once the watch has replayed the bucket (at most ``REPLAY_WAIT``): the live
        replicas are known, and our first put's stamp is the first sample of the clock.
        """
        await self._beat()
        self._joined = True
        self._watcher = await self._kv.watchall()
        self._tasks = [asyncio.create_task(self._follow(self._watcher), name="presence-watch"),
                       asyncio.create_task(self._beat_forever(), name="presence-beat")]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._replayed.wait(), REPLAY_WAIT)

    async def stop(self) -> None:
        """Leave: stop beating, delete our key (others drop us at once), end the watch.

        Each server operation is bounded by ``STOP_TIMEOUT``: with the server gone the key
        simply stops changing, and the others drop us after the window instead.
        """
        self._stopping = True
        # cancelled again until they end, within a bound: a cancellation can be lost in
        # the beat's wait_for on Python 3.11, and the stop must not wait for ever on it
        await cancel_and_wait(self._tasks, timeout=STOP_TIMEOUT)
        self._tasks = []
        if self._joined:
            await self._bounded("delete the replica key", self._kv.delete(self._key))
            self._joined = False
        if self._watcher is not None:
            await self._bounded("stop the replicas watch", self._watcher.stop())
            self._watcher = None
        self._seen.clear()
        self._dirty = True

    @staticmethod
    async def _bounded(what: str, call: Awaitable[object]) -> None:
        try:
            await asyncio.wait_for(call, STOP_TIMEOUT)
        except Exception:
            log.debug("presence: could not %s while stopping", what, exc_info=True)

    def _word(self) -> str | None:
        return None if self._serving is None else str(self._serving())

    async def _beat(self) -> None:
        """Put our key; at once again if whether we serve changed during the put (the
        admin service started or was refused meanwhile: the key must not keep the old word)."""
        if await self._put() != self._word():
            await self._put()

    async def _put(self) -> str | None:
        """Put our key once; the ``admin_service`` word it carried."""
        word = self._word()
        value = PresenceValue(identity=self.identity, started_at=self._started_at,
                              beat_at=self._clock.now(), admin_service=word)
        sent, wall_sent = self._elapsed(), self._wall()
        revision = await self._kv.put(self._key, _encode(value))
        timing = (sent, self._elapsed(), wall_sent, self._wall())
        stamp = self._stamps.pop(revision, None)
        if stamp is not None:
            self._sample(timing, stamp)
        else:
            _bounded_put(self._timings, revision, timing)
        return word

    def _stamped(self, entry: KeyValue.Entry) -> None:
        """Our own put seen by the watch: with its timings, one sample of the server's clock."""
        stamp = _server_seconds(entry.created)
        if self._on_sample is None or stamp is None or entry.revision is None:
            return
        timing = self._timings.pop(entry.revision, None)
        if timing is not None:
            self._sample(timing, stamp)
        else:
            _bounded_put(self._stamps, entry.revision, stamp)

    def _sample(self, timing: tuple[float, float, float, float], stamp: float) -> None:
        if self._on_sample is None:
            return
        sent, acked, wall_sent, wall_acked = timing
        try:
            self._on_sample(Sample(sent=sent, acked=acked, server=stamp, wall_sent=wall_sent,
                                   wall_acked=wall_acked))
        except Exception:
            log.debug("presence: a clock sample was refused", exc_info=True)

    async def announce(self) -> None:
        """Put our key now (its ``admin_service`` word changed); the next beat if it fails."""
        if not self._joined or self._stopping:
            return
        try:
            await asyncio.wait_for(self._beat(), max(self.beat_seconds, MAX_ROUND_TRIP))
        except Exception:
            log.debug("presence: announcing %s failed", self.identity, exc_info=True)

    async def _beat_forever(self) -> None:
        """Re-put our key every beat; a missed beat is only logged (the next one may land)."""
        while not self._stopping:
            await asyncio.sleep(self.beat_seconds)
            try:
                # as long as a clock sample may take: a slow put is still a true sample
                await asyncio.wait_for(self._beat(), max(self.beat_seconds, MAX_ROUND_TRIP))
            except Exception:
                self.failed_beats += 1  # the others judge us by our puts, we them by theirs
                log.debug("presence: a beat of %s failed", self.identity, exc_info=True)

    # ------------------------------------------------------------------ the watch

    async def _follow(self, watcher: KeyValue.KeyWatcher) -> None:
        """Apply the bucket's changes, the keys already there first (each aged by its own
        server timestamp, as every later put).

        The replay ends at the first entry the server delivered with nothing pending after
        it (our own key was put before the watch, so there is one), not at nats-py's ``None``
        marker: that one may come before entries already delivered (the consumer's info can
        overtake them).
        """
        try:
            async for entry in watcher:
                if entry is None:
                    continue
                self._apply(entry)
                if not entry.delta:
                    self._replayed.set()
        except Exception:
            log.debug("presence: the replicas watch ended", exc_info=True)

    def _apply(self, entry: KeyValue.Entry) -> None:
        stamp = _server_seconds(entry.created)
        if stamp is not None and stamp > self._newest:
            self._newest = stamp
            self._dirty = True  # the others' puts age against it
        if entry.key == self._key and entry.operation not in ("DEL", "PURGE"):
            self._stamped(entry)
        identity = None if entry.operation in ("DEL", "PURGE") or not entry.value else (
            self._identity_of(entry))
        if identity is None:  # gone, or not a replica of ours (foreign): not a live one
            if self._seen.pop(entry.key, None) is not None:
                self._dirty = True
            return
        self._seen[entry.key] = (identity, self._newest if stamp is None else stamp)
        self._dirty = True

    def _identity_of(self, entry: KeyValue.Entry) -> str | None:
        """The replica a key's value announces, or None for a value that is not one of ours
        (jetstream/foreign.py): noted, and never counted as a live replica."""
        subject = self._names.replica_subject(self._names.replica_of_key(entry.key)) if (
            _well_formed(self._names, entry.key)) else entry.key
        try:
            return replica_value_on(self._names, subject, entry.value or b"").identity
        except ForeignMessage as exc:
            self.foreign.noted("replicas", subject, int(entry.revision or 0), exc.reason)
            return None

    # ------------------------------------------------------------------ the answer

    def live(self) -> tuple[str, ...]:
        """Sorted identities of the live replicas, always including this one.

        Cached: recomputed only when the watch brought something (a put, a delete: the
        only news that can age a member out, see the module docstring)."""
        if self._dirty:
            self._recompute()
        return self._live

    def _recompute(self) -> None:
        newest, window = self._newest, self.window
        for key in [k for k, (_, put) in self._seen.items() if newest - put >= window]:
            del self._seen[key]
        self._live = tuple(sorted({self.identity, *(i for i, _ in self._seen.values())}))
        self._dirty = False


def _bounded_put(pending: dict[int, _V], revision: int, value: _V) -> None:
    """Keep the newest ``PENDING_BEATS`` entries: a half that never meets its other half
    (a beat whose ack was lost) must not grow the map."""
    pending[revision] = value
    while len(pending) > PENDING_BEATS:
        del pending[next(iter(pending))]


def _well_formed(names: Names, key: str) -> bool:
    try:
        names.replica_of_key(key)
    except (ValueError, UnicodeDecodeError):
        return False
    return True


class JetStreamReplicas:
    """The live replicas port over the replicas bucket (:class:`Presence` per replica)."""

    def __init__(self, js: JetStreamContext, names: Names, *, replicas: int,
                 foreign: ForeignLog | None = None) -> None:
        self._js = js
        self._names = names
        self._replicas = replicas
        self._foreign = foreign

    async def open(self, identity: str, *, clock: Clock,
                   on_sample: Callable[[Sample], None] | None = None,
                   wall: Callable[[], float] | None = None,
                   serving: Callable[[], Serving] | None = None) -> Presence:
        """Bind the bucket (creating it on first use) for ``identity``; not started.
        ``RegistryRefused`` when the server answers no (an error that is no time-out nor a
        passing trouble: a configuration without the bucket)."""
        try:
            return await Presence.open(self._js, self._names, identity,
                                       replicas=self._replicas, clock=clock,
                                       on_sample=on_sample, wall=wall or time.time,
                                       foreign=self._foreign, serving=serving)
        except nats.js.errors.APIError as exc:
            if is_transient(exc):
                raise
            raise RegistryRefused(str(exc) or type(exc).__name__) from exc

"""Follow a stream into an in-memory projection, starting from the last event per subject.

Every event carries the state of its aggregate after it (events.py), so a projection needs
only the last event of each subject: an ordered consumer with
``DeliverPolicy.LAST_PER_SUBJECT`` replays one message per Run or Schedule, then keeps
delivering new events. nats-py's ordered consumer recreates itself from the last seen stream
sequence after a gap or missed heartbeats, so the projection heals after reconnects and
leader changes. Applying is idempotent by sequence (the projection ignores what it already
has), which also makes a writer's own read-your-writes update and the later delivery of the
same event harmless.

A message the projection refuses (it does not decode, it names another Run than its subject,
or it claims a transition that cannot happen: a poison event, forged or corrupt) is skipped,
logged and counted (:attr:`Follower.poisoned`, :attr:`Follower.last_poison`); the follower
goes on with the next one, so one bad message never stops or stalls a projection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import nats.js.errors
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from .event_store import FollowedStore
from .foreign import ForeignLog, ForeignMessage, stream_kind

log = logging.getLogger(__name__)

OnMessage = Callable[[int, str, bytes], None]


def delivery_position(msg: Msg) -> tuple[int, int]:
    """(stream sequence, messages pending) of a delivered JetStream message.

    Read from its reply subject, as nats-py's ``Msg.metadata`` reads it, without building
    its objects (a datetime among them): that was 4 % of a busy replica's CPU, once per
    followed event. Both reply formats: ``$JS.ACK.<stream>.<consumer>.<delivered>.<stream
    seq>.<consumer seq>.<time>.<pending>`` and the one with domain and account hash before
    the stream (and an optional token at the end).
    """
    tokens = (msg.reply or "").split(".")
    if len(tokens) == _V1_TOKENS:
        return int(tokens[5]), int(tokens[8])
    if len(tokens) in _V2_TOKENS:
        return int(tokens[7]), int(tokens[10])
    meta = msg.metadata  # not a JetStream delivery: nats-py says so
    return meta.sequence.stream, meta.num_pending


_V1_TOKENS = 9
_V2_TOKENS = (11, 12)


@dataclass(eq=False)
class Follower:
    """One ordered consumer feeding ``on_message(stream_seq, subject, data)``.

    ``from_seq``: deliver every event from that stream sequence on, not the last event of
    every subject; with ``catch_up`` the events already stored from there are a replay to
    wait for (:meth:`caught_up`; after a checkpoint), without it only new ones matter.
    ``on_skip`` hears of every message the projection refused.
    """

    store: FollowedStore
    stream: str
    filter_subject: str
    on_message: OnMessage
    heartbeat: float = 1.0
    from_seq: int | None = None
    on_skip: Callable[[], None] | None = None
    catch_up: bool = False
    foreign: ForeignLog | None = None
    """Where a foreign message (jetstream/foreign.py) is counted, once, with a warning once per
    subject; without it, it is refused like any other."""
    applied_seq: int = field(default=0, init=False)
    poisoned: int = field(default=0, init=False)
    """Messages skipped because the projection refused them (see the module docstring)."""
    last_poison: str | None = field(default=None, init=False)
    """Which message was skipped last and why (stream sequence, subject, reason)."""
    _sub: Subscription | None = field(default=None, init=False, repr=False)
    _caught_up: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)
    _target_seq: int = field(default=0, init=False, repr=False)

    async def start(self, timeout: float = 30.0) -> None:
        """Subscribe and return once every event stored before the call has been applied
        (TimeoutError when ``timeout`` seconds pass without any event applied)."""
        await self.subscribe()
        await self.caught_up(timeout)

    async def subscribe(self) -> None:
        """Subscribe; the replay of what is stored goes on in the background
        (:meth:`caught_up` waits for it, :attr:`replayed` says whether it is done)."""
        self._target_seq = await self.store.last_seq(self.stream)
        if self.from_seq is not None and self.catch_up:
            # the projection holds every event before it already (a checkpoint)
            self.applied_seq = max(self.applied_seq, self.from_seq - 1)
        if self._target_seq == 0 or (self.from_seq is not None and (
                not self.catch_up or self.from_seq > self._target_seq)):
            self._caught_up.set()  # nothing to replay: only what comes from now on
        self._sub = await self.store.follow(self.stream, self.filter_subject, self._deliver,
                                             heartbeat=self.heartbeat, from_seq=self.from_seq)

    @property
    def replayed(self) -> bool:
        """Whether every event stored before :meth:`subscribe` has been applied."""
        return self._caught_up.is_set()

    async def caught_up(self, timeout: float = 30.0) -> None:
        """Return once the replay is done; TimeoutError after ``timeout`` seconds without
        any event applied. A long replay that keeps moving (100,000 Schedules on a busy
        machine) is waited for; a stalled one fails after ``timeout``."""
        progress = self.applied_seq
        while True:
            try:
                await asyncio.wait_for(self._caught_up.wait(), timeout)
                return
            except TimeoutError:
                if self.applied_seq <= progress:
                    raise
                progress = self.applied_seq

    async def _deliver(self, msg: Msg) -> None:
        seq, pending = delivery_position(msg)
        try:
            self.on_message(seq, msg.subject, msg.data)
        except Exception as exc:  # a bad event must not stop the projection
            self.refused(seq, msg.subject, exc)
        self.applied_seq = max(self.applied_seq, seq)
        if seq >= self._target_seq or pending == 0:
            self._caught_up.set()

    def refused(self, seq: int, subject: str, exc: Exception) -> None:
        """Count and log a message the projection refused (also one its writer held back
        and let go later: jetstream/runlog.py)."""
        self.poisoned += 1
        if isinstance(exc, ForeignMessage) and self.foreign is not None:
            self.last_poison = f"#{seq} on {subject}: {exc.reason}"
            self.foreign.noted(stream_kind(self.store.names, self.stream), subject, seq,
                               exc.reason)
            return
        if self.on_skip is not None:
            self.on_skip()
        reason = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
        self.last_poison = f"#{seq} on {subject}: {type(exc).__name__} {reason}".rstrip()
        log.warning("skipped event %s on %s (%d skipped so far): %s", seq, subject,
                    self.poisoned, self.last_poison, exc_info=log.isEnabledFor(logging.DEBUG))

    async def stop(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            try:
                await sub.unsubscribe()
            except (nats.errors.Error, nats.js.errors.Error):
                log.debug("unsubscribe failed", exc_info=True)

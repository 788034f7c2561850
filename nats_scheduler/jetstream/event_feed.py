"""The event feed of ``nats-scheduler events`` and the console: the Schedule and Run events
of one prefix (or one deployment), the last ones first, then each new one as it is stored.

Read straight from the event streams with ordered consumers, so it needs no scheduler
process, only permission to read the events (``AdminClient.events`` and
``AdminClient.recent_events`` in ``admin/client.py`` open one). A failure to subscribe
becomes :class:`~nats_scheduler.seam.SchedulerUnavailable` (:func:`.errors.unavailable`),
which the admin words as its own UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig, DeliverPolicy

from ..core.events import AnyEvent, decode_event
from ..names import Names
from .errors import is_engine_failure, unavailable

log = logging.getLogger(__name__)

CLOSE_SECONDS = 2.0
"""How long closing an event feed may wait for the server before it lets go."""


def event_type(event: AnyEvent) -> str:
    """The stable tag of an event, e.g. ``run.dispatched``."""
    return str(type(event).__struct_config__.tag)


def type_matches(tag: str, types: set[str] | None) -> bool:
    """``types`` holds tags (``run.failed``) or families (``run``, ``schedule``)."""
    if not types:
        return True
    return any(tag == t or tag.startswith(t.rstrip(".*") + ".") for t in types)



def in_order(buffered: list[tuple[int, int, AnyEvent]]) -> list[AnyEvent]:
    """Events read from several streams ``(source, stream sequence, event)``, oldest first:
    each stream's in its own order (its sequence), the streams merged by the events' times.

    Not one sort by time: events of one stream are stamped by the clocks of the processes
    that wrote them (each the store's clock as that process estimates it), so a later event
    can carry an earlier time than the one stored before it; the stream's order is the
    order they happened in (a hold shown before the apply it followed)."""
    streams: dict[int, list[tuple[int, AnyEvent]]] = {}
    for source, seq, event in buffered:
        streams.setdefault(source, []).append((seq, event))
    ordered = ([event for _, event in sorted(items, key=lambda item: item[0])]
               for items in streams.values())
    return list(heapq.merge(*ordered, key=lambda event: event.at))


class EventFeed:
    """Ordered consumers on the Schedule and Run events, merged into one feed.

    ``start(history)`` subscribes and returns the last ``history`` matching events (sorted
    by time); ``live()`` then yields each new one. With a deployment filter, the history is
    read from that deployment's subjects only.
    """

    def __init__(self, nc: Client, names: Names, *, deployment_id: str | None,
                 types: set[str] | None, timeout: float) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=timeout)
        self.names = names
        self.types = types
        self.timeout = timeout
        if deployment_id is None:
            self.sources = [(names.schedules_stream, names.schedules_filter),
                            (names.runs_stream, names.runs_filter)]
        else:
            self.sources = [(names.schedules_stream, names.schedule_subject(deployment_id)),
                            (names.runs_stream, names.deployment_runs_filter(deployment_id))]
        self.filtered = deployment_id is not None
        self._queue: asyncio.Queue[tuple[int, Msg]] = asyncio.Queue()
        self._subs: list[Any] = []

    async def _subscribe(self, index: int, stream: str, subject: str, history: int) -> int:
        """Subscribe one source; returns how many messages it has to deliver first."""
        config = None
        policy = DeliverPolicy.NEW
        if history > 0 and self.filtered:
            policy = DeliverPolicy.ALL
        elif history > 0:
            info = await self.js.stream_info(stream)
            first = max(info.state.first_seq, info.state.last_seq - history + 1, 1)
            policy = DeliverPolicy.BY_START_SEQUENCE
            config = ConsumerConfig(opt_start_seq=first)

        async def deliver(msg: Msg) -> None:
            await self._queue.put((index, msg))

        sub = await self.js.subscribe(subject, stream=stream, cb=deliver, ordered_consumer=True,
                                      deliver_policy=policy, config=config, idle_heartbeat=2.0)
        self._subs.append(sub)
        if policy == DeliverPolicy.NEW:
            return 0
        # Messages may already have been pushed (no longer pending): count them too, so the
        # history ends only with the message whose num_pending is 0.
        info = await sub.consumer_info()
        delivered = info.delivered.consumer_seq if info.delivered is not None else 0
        return int((info.num_pending or 0) + (delivered or 0))

    async def start(self, history: int, *, wait: bool = True) -> list[AnyEvent]:
        """Subscribe; return the history. ``wait``: while no scheduler has ever run with
        this prefix, wait for its events to appear (else there is no history: empty)."""
        pending = {}
        for index, (stream, subject) in enumerate(self.sources):
            try:
                pending[index] = await self._wait_for_stream(index, stream, subject, history,
                                                             wait)
            except Exception as exc:
                if is_engine_failure(exc):
                    raise unavailable(f"the events of {stream} could not be read", exc) from exc
                raise
            if pending[index] < 0:
                return []
        caught_up = {i for i, n in pending.items() if n == 0}
        buffered: list[tuple[int, int, AnyEvent]] = []
        while len(caught_up) < len(self.sources):
            try:
                index, msg = await asyncio.wait_for(self._queue.get(), self.timeout)
            except TimeoutError:
                break  # a source went quiet before reporting the end: show what we have
            self._keep(buffered, index, msg)
            if msg.metadata.num_pending == 0:
                caught_up.add(index)
        while not self._queue.empty():
            self._keep(buffered, *self._queue.get_nowait())
        events = in_order(buffered)
        return events[-history:] if history > 0 else []

    async def _wait_for_stream(self, index: int, stream: str, subject: str, history: int,
                               wait: bool) -> int:
        """Subscribe, waiting while no scheduler has created the event log yet (-1: none)."""
        while True:
            try:
                return await self._subscribe(index, stream, subject, history)
            except nats.js.errors.NotFoundError:
                if not wait:
                    return -1
                await asyncio.sleep(0.5)  # poll: the first provider creates it at start

    def _keep(self, buffered: list[tuple[int, int, AnyEvent]], index: int, msg: Msg) -> None:
        event = self._decode(msg)
        if event is not None:
            buffered.append((index, msg.metadata.sequence.stream, event))

    def _decode(self, msg: Msg) -> AnyEvent | None:
        try:
            event = decode_event(msg.data)
        except (msgspec.ValidationError, msgspec.DecodeError):
            log.warning("skipping an event this client cannot read on %s", msg.subject)
            return None
        return event if type_matches(event_type(event), self.types) else None

    async def live(self) -> AsyncIterator[AnyEvent]:
        while True:
            _, msg = await self._queue.get()
            event = self._decode(msg)
            if event is not None:
                yield event

    async def close(self) -> None:
        """Unsubscribe every source, within ``CLOSE_SECONDS`` in all.

        Unsubscribing an ephemeral consumer asks the server to delete it and waits for the
        answer; a slow server must not hold up a Ctrl+C (the consumers expire by themselves).
        """
        subs, self._subs = self._subs, []
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(sub.unsubscribe() for sub in subs),
                                                  return_exceptions=True), CLOSE_SECONDS)

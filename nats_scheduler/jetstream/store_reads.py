"""The admin's read-only reads of the store, for when no scheduler process answers.

The admin's store reader (``admin/reader.py``), the account of due times
(``admin/account_reads.py``), the invariant checker and ``doctor`` read the store without a
provider: the last message of every subject (each event carries its aggregate's state after
it), every message of one subject, a scatter-gather request every replica answers, the
retention the index stream enforces and the sizes of the event streams. This module is how
they reach the server: ordered consumers, stream info and core requests of nats-py, each
answering in the scheduler's terms (:class:`Stored`, :class:`Retention`,
:class:`EventStreams`), with a missing stream read as "nothing stored yet".

Other failures propagate; :func:`.errors.is_engine_failure` tells them from the caller's own.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import datetime

import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import DeliverPolicy, StreamConfig

from ..names import HDR_STATUS, Names


@dataclass(frozen=True)
class Stored:
    """One message read back: its stream sequence, subject, body and headers, and when the
    server stored it (when the read tells: consumers do, stream gets do not)."""

    seq: int
    subject: str
    data: bytes
    headers: dict[str, str]
    stored_at: datetime | None = None


async def _ordered(nc: Client, stream: str, subject_filter: str, policy: DeliverPolicy,
                   timeout: float) -> list[Stored]:
    """What an ordered consumer with ``policy`` delivers up to the end (empty if no stream).

    A delivered message's ``num_pending`` of 0 says it was the last one. The consumer pushes
    at once, so its info may already show nothing pending: it is empty only if nothing was
    delivered either.
    """
    js = nc.jetstream(timeout=timeout)
    try:
        sub = await js.subscribe(subject_filter, stream=stream, ordered_consumer=True,
                                 deliver_policy=policy)
    except nats.js.errors.NotFoundError:
        return []
    found: list[Stored] = []
    try:
        info = await sub.consumer_info()
        delivered = info.delivered.consumer_seq if info.delivered is not None else 0
        pending = (info.num_pending or 0) + (delivered or 0)
        while pending > 0:
            msg: Msg = await sub.next_msg(timeout)
            meta = msg.metadata
            found.append(Stored(meta.sequence.stream, msg.subject, msg.data,
                                dict(msg.headers or {}), meta.timestamp))
            pending = meta.num_pending
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return found


async def last_per_subject(nc: Client, stream: str, subject_filter: str, *,
                           timeout: float = 5.0) -> list[Stored]:
    """The last message of every subject matching ``subject_filter`` (empty if no stream)."""
    return await _ordered(nc, stream, subject_filter, DeliverPolicy.LAST_PER_SUBJECT, timeout)


async def every_message(nc: Client, stream: str, subject: str, *,
                        timeout: float = 5.0) -> list[Stored]:
    """Every message of ``subject``, oldest first (empty if no stream): for a subject of a
    few messages, such as one Schedule's changes."""
    return await _ordered(nc, stream, subject, DeliverPolicy.ALL, timeout)


async def last_message(nc: Client, stream: str, subject: str, *, timeout: float = 5.0
                       ) -> Stored | None:
    """The last message of ``subject`` (wildcards allowed), or None."""
    js = nc.jetstream(timeout=timeout)
    try:
        msg = await js.get_last_msg(stream, subject)
    except nats.js.errors.NotFoundError:
        return None
    return Stored(int(msg.seq or 0), msg.subject or subject, msg.data or b"",
                  dict(msg.headers or {}))


async def gather(nc: Client, subject: str, payload: bytes = b"{}", *, timeout: float = 1.0,
                 settle: float = 0.15) -> list[bytes]:
    """Scatter-gather: publish once, collect every answer.

    Stops ``settle`` seconds after the last answer, at ``timeout``, or at once when the
    server reports that nobody listens (a 503 status message).
    """
    inbox = nc.new_inbox()
    queue: asyncio.Queue[Msg] = asyncio.Queue()

    async def collect(msg: Msg) -> None:
        await queue.put(msg)

    sub = await nc.subscribe(inbox, cb=collect)
    answers: list[bytes] = []
    try:
        await nc.publish(subject, payload, reply=inbox)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            wait = min(remaining, settle) if answers else remaining
            try:
                msg = await asyncio.wait_for(queue.get(), wait)
            except TimeoutError:
                break
            if (msg.headers or {}).get(HDR_STATUS) == "503":
                break
            answers.append(msg.data)
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return answers


@dataclass(frozen=True)
class Retention:
    """The history retention in force: the limits of the index stream ``<P>_RUNINDEX``.

    The server enforces them (docs/configuration.md, "History retention"), so they, not any
    process's settings, say what the history keeps. None: no such limit on the stream.
    """

    days: float | None
    """``max_age`` in days: no finished Run older than this is kept."""
    runs: int | None
    """``max_msgs_per_subject``: the newest Runs kept per deployment."""


def retention_of(config: StreamConfig) -> Retention:
    """The retention an index stream's configuration sets (0 / -1 in NATS: no limit)."""
    age = config.max_age or 0.0
    per_subject = config.max_msgs_per_subject
    return Retention(days=age / 86_400 if age > 0 else None,
                     runs=per_subject if per_subject and per_subject > 0 else None)


async def index_retention(nc: Client, names: Names, *, timeout: float = 5.0
                          ) -> Retention | None:
    """The retention in force, or None when the index stream does not exist (no provider of
    this version has started with this prefix yet). Other failures propagate.

    One reading for every place that shows it: the store health of the admin service and of
    the store fallback (both ``StoreReader.store_health``), the account and ``doctor``.
    """
    try:
        info = await nc.jetstream(timeout=timeout).stream_info(names.index_stream)
    except nats.js.errors.NotFoundError:
        return None
    return retention_of(info.config)


@dataclass(frozen=True)
class EventStreams:
    """What the store health shows of the event streams: the Run events' replicas and
    leader, and how many events each stream holds."""

    replicas: int | None
    leader: str | None
    schedule_events: int
    run_events: int


async def event_streams(nc: Client, names: Names, *, timeout: float = 5.0
                        ) -> EventStreams | None:
    """The event streams' figures, or None when they do not exist yet (no scheduler process
    has started with this prefix). Other failures propagate."""
    js = nc.jetstream(timeout=timeout)
    try:
        runs = await js.stream_info(names.runs_stream)
        schedules = await js.stream_info(names.schedules_stream)
    except nats.js.errors.NotFoundError:
        return None
    return EventStreams(replicas=runs.config.num_replicas,
                        leader=runs.cluster.leader if runs.cluster is not None else None,
                        schedule_events=schedules.state.messages,
                        run_events=runs.state.messages)


__all__ = ["EventStreams", "Retention", "Stored", "event_streams", "every_message", "gather",
           "index_retention", "last_message", "last_per_subject", "retention_of"]

"""The event store on JetStream: conditional appends and leader reads, behind one policy.

Everything that talks to the server for the provider goes through :class:`Store`, so there is
one place that retries transient failures (for ``store_retry_seconds``, long enough for a
leader election), fails over to another server of a cluster, and turns what is left into the
seam's errors (:mod:`.retry`). Its callers see it through the Protocols of
:mod:`.event_store`. Preparing the streams is :mod:`.setup`; the batched direct get,
:mod:`.direct_batch`; the pipelined publishes, :mod:`.acks`.

Appends are conditional on the subject's last sequence
(``Nats-Expected-Last-Subject-Sequence``). That header is the uniqueness constraint of a Run
(expected ``0`` on the Run's own subject) and the single-writer rule of every later event.
Each append also carries a ``Nats-Msg-Id``: after a lost acknowledgement, the resent message
gets error 10071 rather than ``duplicate`` (docs/design.md, "Error 10071 and the resend
trap"), so on 10071 the store reads the subject's last message and treats a matching ID as
its own success.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy, StreamConfig
from nats.js.kv import KeyValue

from ..names import HDR_EXPECTED_LAST_SUBJECT_SEQUENCE, HDR_MSG_ID, Names
from ..settings import NatsSettings
from . import errors, setup
from .acks import ATOMIC_MIN, ATOMIC_MIN_SYNC_ALWAYS, Ack, AckedPublisher, Outgoing
from .connection import check_server
from .decisions import DecisionNonces
from .direct import Answer, Request, reader_of
from .direct_batch import DIRECT_GET_TIMEOUT, direct_batch_once
from .errors import Conflict
from .event_store import Judge, StoredMessage, SubjectTail
from .foreign import ForeignLog, stream_kind
from .permissions import ViolationLog
from .retry import Retrier
from .subject_tail import find_tail

log = logging.getLogger(__name__)

T = TypeVar("T")


FOLLOW_TIMEOUT = 30.0
"""Seconds the server may take to set up a follower of the last event per subject."""


MAX_FOREIGN_SKIPS = 8
"""Appends one write may make on the way past foreign messages (each a new one stored after
the last it saw) before it counts as a conflict."""


class NotAtomic(Exception):
    """The stream does not take atomic batches (its ``allow_atomic`` is off)."""


class Store:
    """JetStream access for one provider process.

    ``retry_seconds`` bounds how long a transient failure is retried before the operation
    raises SchedulerUnavailable. ``count_error`` hears of every failure :meth:`retrying` sees,
    by kind (``transient``: retried, ``unavailable``: raised, ``conflict``: a refused
    conditional append), for the provider's metrics (:mod:`nats_scheduler.runtime.metrics`).
    """

    def __init__(self, nc: Client, settings: NatsSettings, *,
                 count_error: Callable[[str], None] | None = None,
                 foreign: ForeignLog | None = None,
                 violations: ViolationLog | None = None) -> None:
        self.nc = nc
        self.violations = violations
        """The server's permission refusals on ``nc``, when its connect recorded them
        (``open_store`` does: the admin service checks its subscriptions with it)."""
        self.js: JetStreamContext = nc.jetstream(timeout=2.0)
        self.acks = AckedPublisher(nc, timeout=2.0, atomic_min=(
            ATOMIC_MIN_SYNC_ALWAYS if settings.server_sync_always else ATOMIC_MIN))
        self.settings = settings
        self.names = Names(settings.prefix)
        self.decisions = DecisionNonces()
        """This writer's decision nonces, for the Msg-Ids of later events (runlog, schedulelog)."""
        self._retry = Retrier(nc, settings.store_retry_seconds, count_error)
        self.foreign = foreign or ForeignLog()
        """The foreign messages this process's readers skipped (jetstream/foreign.py)."""
        self._leases: KeyValue | None = None
        self.checkpoints = False
        """Whether the store keeps checkpoints of the Schedule table for this scheduler
        (``ensure`` finds out; ``jetstream/checkpoints.py``)."""

    # ---------------------------------------------------------------- retrying

    @property
    def retry_seconds(self) -> float:
        """The retry budget of one operation (``store_retry_seconds``)."""
        return self._retry.retry_seconds

    async def retrying(
        self, what: str, op: Callable[[], Awaitable[T]], retry_seconds: float | None = None
    ) -> T:
        """Run ``op``, retrying transient failures; SchedulerUnavailable when time runs out.

        ``retry_seconds`` overrides the store's budget for this call (0: one attempt).
        See :meth:`Retrier.retrying`.
        """
        return await self._retry.retrying(what, op, retry_seconds)

    # ---------------------------------------------------------------- preparing

    async def check_server(self) -> None:
        """Refuse servers that are too old or have JetStream off (see :mod:`.connection`)."""
        await self.retrying("could not check the server", lambda: check_server(self.nc, self.js))

    def stream_configs(self) -> list[StreamConfig]:
        """The event logs as this store wants them (see :func:`.setup.stream_configs`)."""
        return setup.stream_configs(self.names, self.settings)

    async def ensure(self) -> None:
        """Create or verify the streams and the lease bucket (idempotent, race-safe), and
        the Schedule table's checkpoints where the store allows them."""
        self._leases = await setup.ensure(self.js, self.names, self.settings, self._retry)
        self.checkpoints = await setup.ensure_checkpoints(self.js, self.names, self.settings)

    @property
    def leases(self) -> KeyValue:
        """The lease bucket (``Store.ensure()`` opens it)."""
        assert self._leases is not None, "Store.ensure() first"
        return self._leases

    # ---------------------------------------------------------------- appends

    async def append(
        self, subject: str, data: bytes, *, expected_seq: int, msg_id: str,
        retry_seconds: float | None = None, judge: Judge | None = None,
    ) -> tuple[int, bool]:
        """Append if the subject's last sequence is ``expected_seq`` (0: subject empty).

        Returns (sequence, duplicate). Raises :class:`Conflict` when another writer got there
        first. ``duplicate`` means a message with this ``msg_id`` was already stored (ours,
        resent after a lost ack, or a replica's with the same deterministic ID).
        ``retry_seconds=0`` sends once: for a write whose decision must not be re-sent later
        (a scheduled Run's create, decided on a Schedule read that ages).

        ``judge`` tells the subject's messages of ours from foreign ones (jetstream/foreign.py):
        given, an append refused only because foreign messages were stored after the last
        message of ours the writer saw (``expected_seq``; 0: none) is made again after them,
        so a foreign message never wedges the subject; a message of ours stored since is
        still a conflict.
        """
        headers = {HDR_MSG_ID: msg_id, HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: str(expected_seq)}
        stream = self._stream_of(subject)

        async def op() -> tuple[int, bool]:
            try:
                # gathered with the appends other tasks make in this turn of the loop into
                # one atomic batch (one acknowledgement); a refused batch is resent one by
                # one, so this append gets exactly its own answer (jetstream/acks.py)
                ack = await self.acks.publish_grouped(stream, subject, data, headers)
                return ack.seq, ack.duplicate
            except nats.js.errors.APIError as exc:
                if not errors.is_conflict(exc):
                    raise
                return await self._refused(stream, subject, data, msg_id, expected_seq,
                                           judge, exc)

        return await self.retrying("could not store an event", op, retry_seconds)

    async def _refused(self, stream: str, subject: str, data: bytes, msg_id: str,
                       expected_seq: int, judge: Judge | None,
                       exc: Exception) -> tuple[int, bool]:
        """An append the store refused (its expected sequence): ours after all (a resend
        after a lost acknowledgement), made after foreign messages (``judge``), or
        :class:`Conflict`."""
        if judge is None:
            last = await self._last(subject)
            if last is not None and last.msg_id == msg_id:
                return last.seq, True
            raise Conflict(subject) from exc
        expected = expected_seq
        for _ in range(MAX_FOREIGN_SKIPS):
            tail = await self._tail(subject, judge, known=expected_seq)
            ours = tail.ours
            if ours is not None and ours.msg_id == msg_id:
                return ours.seq, True
            if (ours.seq if ours else 0) != expected_seq or tail.last_seq <= expected:
                raise Conflict(subject) from exc
            expected = tail.last_seq  # only foreign messages since: append after them
            headers = {HDR_MSG_ID: msg_id, HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: str(expected)}
            try:
                ack = await self.acks.publish_grouped(stream, subject, data, headers)
                return ack.seq, ack.duplicate
            except nats.js.errors.APIError as again:
                if not errors.is_conflict(again):
                    raise
                exc = again
        raise Conflict(subject) from exc

    async def publish(self, subject: str, data: bytes, *, msg_id: str) -> int:
        """Append unconditionally (de-duplicated by ``msg_id``); returns the sequence."""
        headers = {HDR_MSG_ID: msg_id}

        stream = self._stream_of(subject)

        async def op() -> int:
            # gathered with this turn's other publishes to the stream (one batch, one fsync)
            ack = await self.acks.publish_grouped(stream, subject, data, headers)
            return ack.seq

        return await self.retrying("could not store an event", op)

    async def publish_once(self, subject: str, data: bytes,
                           headers: dict[str, str] | None = None) -> Ack:
        """One acknowledged publish, sent once: its acknowledgement or the client's own error.

        For writes whose caller has its own answer to a failure and must not wait out the
        retry budget (a lease's compare-and-set, a change decided on a stale copy). Not
        retried and not counted, but what it sees counts for failover (:meth:`Retrier.once`),
        which only schedules a reconnect: it takes no longer than the publish.
        """
        return await self._retry.once(lambda: self.acks.publish(subject, data, headers))

    async def publish_grouped(self, stream: str, subject: str, data: bytes,
                              headers: dict[str, str] | None = None) -> Ack:
        """:meth:`publish_once`, gathered with the other publishes to ``stream`` made in the
        same turn of the event loop (:meth:`AckedPublisher.publish_grouped`): one atomic
        batch, one acknowledgement and, with ``sync_interval: always``, one fsync, where a
        herd's lease renewals were one fsync each. A refused batch is resent one message at a
        time, so the answer (a lost compare-and-set included) is this message's own."""
        return await self._retry.once(
            lambda: self.acks.publish_grouped(stream, subject, data, headers))

    async def publish_many(self, messages: Sequence[Outgoing]) -> list[Ack | Exception]:
        """Pipelined publishes, one result per message (:meth:`AckedPublisher.publish_many`);
        not retried, noted for failover."""
        results = await self.acks.publish_many(messages)
        await self._retry.note_results(results)
        return results

    async def publish_batched(self, stream: str,
                              messages: Sequence[Outgoing]) -> list[Ack | Exception]:
        """An atomic batch while the stream takes it, else pipelined publishes, one result per
        message (:meth:`AckedPublisher.publish_batched`); not retried, noted for failover."""
        results = await self.acks.publish_batched(stream, messages)
        await self._retry.note_results(results)
        return results

    async def publish_atomic(self, stream: str,
                             messages: Sequence[Outgoing]) -> list[Ack] | Exception:
        """``messages`` as one atomic batch (ADR-50): an acknowledgement each (contiguous
        sequences), or the failure of the whole batch: then nothing of it was stored, unless
        it went unanswered (its caller settles that one message at a time). A stream that
        does not take atomic batches answers so without a request, from its first refusal
        on. Not retried; noted for failover."""
        if stream in self.acks.not_atomic:
            return NotAtomic(stream)
        result = await self.acks.publish_atomic(messages)
        if isinstance(result, Exception):
            self.acks.refused(stream, result)
        else:
            self.acks.batches_atomic += 1
        await self._retry.note_results([result] if isinstance(result, Exception) else result)
        return result

    async def publish_atomic_or_each(
        self, stream: str, messages: Sequence[Outgoing], *, resend: Callable[[], bool]
    ) -> list[Ack | Exception] | Exception:
        """Writes each decided once, in one atomic batch; refused, sent one by one only if
        ``resend()``, else the one failure of the whole batch
        (:meth:`AckedPublisher.publish_atomic_or_each`); noted for failover."""
        results = await self.acks.publish_atomic_or_each(stream, messages, resend=resend)
        await self._retry.note_results([results] if isinstance(results, Exception)
                                       else results)
        return results

    # ---------------------------------------------------------------- leader reads

    async def _last(
        self, subject: str, stream: str | None = None, *, next_from: int | None = None
    ) -> StoredMessage | None:
        stream = stream or self._stream_of(subject)
        try:
            # Not a direct get: direct gets may be answered by a follower (ADR-8) and the
            # provider's decisions need the leader's view.
            if next_from is not None:
                msg = await self.js.get_msg(stream, seq=next_from, subject=subject, next=True)
            else:
                msg = await self.js.get_last_msg(stream, subject)
        except nats.js.errors.NotFoundError:
            return None
        except nats.js.errors.APIError as exc:
            if errors.is_not_found(exc):
                return None
            raise
        headers = msg.headers or {}
        return StoredMessage(
            subject=msg.subject or subject,
            seq=int(msg.seq or 0),
            data=msg.data or b"",
            msg_id=headers.get(HDR_MSG_ID),
            stored_at=msg.time,
        )

    async def last(self, subject: str, stream: str | None = None) -> StoredMessage | None:
        """The last message of ``subject`` (wildcards allowed), or None."""
        return await self.retrying("could not read", lambda: self._last(subject, stream))

    async def next(self, subject: str, from_seq: int = 1) -> StoredMessage | None:
        """The first message of ``subject`` at or after stream sequence ``from_seq``, or None.

        ``from_seq=1``: the subject's first message (e.g. a Run's ``run.created``).
        """
        return await self.retrying("could not read",
                                   lambda: self._last(subject, next_from=max(1, from_seq)))

    async def tail(self, subject: str, judge: Judge, *, known: int = 0) -> SubjectTail:
        """The subject's last sequence and its last message of ours, from the stream leader.

        A foreign last message (``judge`` refuses it) is skipped and counted, and the last
        message ``judge`` takes before it is found: read in batches from ``known`` (a
        position at or before it, when the caller knows one) and confirmed on the leader.
        """
        return await self.retrying("could not read",
                                   lambda: self._tail(subject, judge, known=known))

    async def _tail(self, subject: str, judge: Judge, *, known: int = 0) -> SubjectTail:
        stream = self._stream_of(subject)
        return await find_tail(
            subject, judge, known=known,
            leader=lambda from_seq: self._last(subject, stream, next_from=from_seq),
            last=lambda: self._last(subject, stream),
            batch=lambda request: direct_batch_once(self.nc, stream, request),
            foreign=lambda stored, reason: self.foreign.noted(
                stream_kind(self.names, stream), stored.subject, stored.seq, reason))

    async def last_seq(self, stream: str) -> int:
        """The stream's last sequence, from its leader (0 when it holds nothing, or does not
        exist yet: a namespace no provider has prepared reads as empty)."""
        return await self.retrying("could not read", lambda: self.last_seq_once(stream))

    async def created(self, stream: str) -> str:
        """When ``stream`` was created (the server's word): tells a stream made again."""
        info = await self.retrying("could not read the store",
                                   lambda: self.js.stream_info(stream))
        return str(info.created)

    async def last_seq_once(self, stream: str) -> int:
        """:meth:`last_seq`, asked once: no retry, and a failure is raised as the client's
        own error, uncounted (for a caller with a fallback of its own)."""
        async def op() -> int:
            try:
                info = await self.js.stream_info(stream)
            except nats.js.errors.NotFoundError:
                return 0
            return info.state.last_seq if info.state.messages else 0

        return await self._retry.once(op)

    # ---------------------------------------------------------------- following, history

    async def follow(
        self, stream: str, filter_subject: str, cb: Callable[[Msg], Awaitable[None]],
        *, heartbeat: float, from_seq: int | None = None,
    ) -> JetStreamContext.PushSubscription:
        """An ordered consumer delivering the last event per subject (or, with ``from_seq``,
        every event from that sequence on), then every new one.

        nats-py's ordered consumer recreates itself from the last seen stream sequence after
        a gap or missed heartbeats, so a follower heals after reconnects and leader changes.
        """
        if from_seq is None:
            # the server finds the last message of every subject before it answers: seconds
            # on a loaded server with a million Schedules, well past the usual time-out
            return await self.nc.jetstream(timeout=FOLLOW_TIMEOUT).subscribe(
                filter_subject, stream=stream, cb=cb, ordered_consumer=True,
                idle_heartbeat=heartbeat, deliver_policy=DeliverPolicy.LAST_PER_SUBJECT)
        return await self.js.subscribe(
            filter_subject, stream=stream, cb=cb, ordered_consumer=True,
            idle_heartbeat=heartbeat, deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            config=ConsumerConfig(opt_start_seq=from_seq))

    async def direct_batch(self, stream: str, request: dict[str, object]) -> list[Msg]:
        """A batched direct get (ADR-31): every message the request selects, in order,
        retried as one (:func:`.direct_batch.direct_batch_once`). May be answered by a
        stream follower: for history, which is read-only; decisions read the leader."""
        return await self.retrying("could not read the history",
                                   lambda: direct_batch_once(self.nc, stream, request))

    async def direct_many(self, requests: Sequence[Request]) -> list[Answer]:
        """Several batched direct gets sent together on the connection's standing reply
        subscription (:mod:`.direct`), every answer awaited, retried as one."""
        reader = reader_of(self.nc)
        return await self.retrying("could not read the history",
                                   lambda: reader.get_many(requests, DIRECT_GET_TIMEOUT))

    async def purge_subject(
        self, stream: str, subject: str, *, before_seq: int | None = None
    ) -> None:
        """Remove the messages of ``subject`` (wildcards allowed): all of them, or those stored
        before ``before_seq``."""
        await self.retrying("could not apply the history retention",
                            lambda: self.js.purge_stream(stream, subject=subject, seq=before_seq))

    # ---------------------------------------------------------------- the connection

    @property
    def connected(self) -> bool:
        """Whether the connection is up now (a publish would not be buffered)."""
        return self.nc.is_connected

    @property
    def max_payload(self) -> int:
        """The server's largest message, in bytes (0 when not known)."""
        return int(self.nc.max_payload or 0)

    def _stream_of(self, subject: str) -> str:
        if self.names.is_run_subject(subject):
            return self.names.runs_stream
        if self.names.is_index_subject(subject):
            return self.names.index_stream
        if self.names.is_checkpoint_subject(subject):
            return self.names.checkpoints_stream
        if self.names.is_outage_subject(subject):
            return self.names.outages_stream
        return self.names.schedules_stream

    async def close(self) -> None:
        await self.acks.close()
        try:
            await asyncio.wait_for(self.nc.close(), 5.0)
        except Exception:  # closing a broken connection must not fail a stop()
            log.debug("closing the connection failed", exc_info=True)


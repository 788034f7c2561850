"""The event store on JetStream: connecting, preparing streams, conditional appends, reads.

Everything that talks to the server for the provider goes through :class:`Store`, so there is
one place that retries transient failures (for ``store_retry_seconds``, long enough for a
leader election) and one place that turns what is left into the seam's errors.

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
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TypeVar

import msgspec
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamInfo,
)
from nats.js.kv import KeyValue

from ..names import (
    HDR_DESCRIPTION,
    HDR_EXPECTED_LAST_SUBJECT_SEQUENCE,
    HDR_MSG_ID,
    HDR_STATUS,
    Names,
    direct_get_subject,
)
from ..seam import SchedulerConfigurationError, SchedulerError
from ..settings import NatsSettings
from . import errors
from .acks import AckedPublisher
from .connection import check_server
from .decisions import DecisionNonces
from .errors import Conflict

log = logging.getLogger(__name__)

T = TypeVar("T")

DIRECT_GET_TIMEOUT = 2.0
"""Seconds a batched read may take before it counts as a transient failure."""

UPGRADE_TIMEOUT = 1.0
"""Seconds ``start()`` waits for the upgrade of a stream made by an older release."""

FAILOVER_AFTER = 2.0
"""Seconds a server may leave the store unanswered before the store connects to another one
of the cluster (and the least time between two such switches)."""



class BatchRefused(Exception):
    """The server refused a batched read (its status and description)."""

    def __init__(self, status: str, description: str) -> None:
        super().__init__(f"{status} {description}".strip())
        self.status = status


@dataclass(frozen=True)
class StoredMessage:
    """One message of a subject, as the stream leader stored it."""

    subject: str
    seq: int
    data: bytes
    msg_id: str | None
    stored_at: datetime | None = None
    """The server's timestamp of storing it."""


class Store:
    """JetStream access for one provider process.

    ``retry_seconds`` bounds how long a transient failure is retried before the operation
    raises SchedulerUnavailable. ``count_error`` hears of every failure :meth:`retrying` sees,
    by kind (``transient``: retried, ``unavailable``: raised, ``conflict``: a refused
    conditional append), for the provider's metrics (:mod:`nats_scheduler.runtime.metrics`).
    """

    def __init__(self, nc: Client, settings: NatsSettings, *,
                 count_error: Callable[[str], None] | None = None) -> None:
        self.nc = nc
        self.count_error: Callable[[str], None] = count_error or (lambda _kind: None)
        self.js: JetStreamContext = nc.jetstream(timeout=2.0)
        self.acks = AckedPublisher(nc, timeout=2.0)
        self.settings = settings
        self.names = Names(settings.prefix)
        self.decisions = DecisionNonces()
        """This writer's decision nonces, for the Msg-Ids of later events (runlog, schedulelog)."""
        self.retry_seconds = settings.store_retry_seconds
        self._leases: KeyValue | None = None
        self._failed_over_at = float("-inf")
        self._unanswered_since: float | None = None
        """When the connected server first left an operation unanswered, since its last answer."""

    # ---------------------------------------------------------------- retrying

    async def retrying(
        self, what: str, op: Callable[[], Awaitable[T]], retry_seconds: float | None = None
    ) -> T:
        """Run ``op``, retrying transient failures; SchedulerUnavailable when time runs out.

        ``retry_seconds`` overrides the store's budget for this call (0: one attempt).
        """
        loop = asyncio.get_running_loop()
        budget = self.retry_seconds if retry_seconds is None else retry_seconds
        started = loop.time()
        deadline = started + budget
        delay = 0.05
        while True:
            try:
                result = await op()
            except Conflict:
                self._answered()
                self.count_error("conflict")
                raise
            except SchedulerError:
                raise
            except Exception as exc:
                await self._note_failure(exc, loop.time() - started)
                if not errors.is_transient(exc) or loop.time() + delay > deadline:
                    self.count_error("unavailable")
                    raise errors.unavailable(what, exc) from exc
                self.count_error("transient")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
            else:
                self._answered()
                return result

    def _answered(self) -> None:
        """The connected server answered an operation: it is not the one to leave."""
        self._unanswered_since = None

    async def _note_failure(self, exc: BaseException, failing_for: float = 0.0) -> None:
        """Note an operation the server left without a usable answer; fail over after 2 s.

        2 s of one operation failing (``failing_for``), or 2 s in which no operation got an
        answer: a one-shot write (a scheduled Run's create) or a confirmation never lasts
        2 s on its own, yet a partitioned node leaves every operation unanswered
        (tests/faults/test_faults_cluster.py)."""
        if not errors.unanswered(exc):
            return
        now = asyncio.get_running_loop().time()
        if self._unanswered_since is None:
            self._unanswered_since = now
        await self._fail_over(max(failing_for, now - self._unanswered_since))

    async def _fail_over(self, failing_for: float) -> None:
        """Connect to another server when this one has not answered for a while.

        A node partitioned from the rest of the cluster stays reachable, so the client would
        stay on it; the others may have a quorum (tests/faults/test_faults_cluster.py).
        """
        now = asyncio.get_running_loop().time()
        if (failing_for < FAILOVER_AFTER or now - self._failed_over_at < FAILOVER_AFTER
                or len(self.nc.servers) < 2):
            return
        self._failed_over_at = now
        self._unanswered_since = None  # the next server gets its own 2 s
        log.warning("the connected server has not answered for %.1f s; trying another one",
                    failing_for)
        await self.nc.force_reconnect()

    # ---------------------------------------------------------------- preparing

    async def check_server(self) -> None:
        """Refuse servers that are too old or have JetStream off (see :mod:`.connection`)."""
        await self.retrying("could not check the server", lambda: check_server(self.nc, self.js))

    def stream_configs(self) -> list[StreamConfig]:
        names = self.names
        common = dict(
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            num_replicas=self.settings.replicas,
            discard=DiscardPolicy.OLD,
            max_msgs_per_subject=-1,
            allow_direct=True,
            deny_delete=True,
            duplicate_window=120.0,
            allow_atomic=True,
        )
        settings = self.settings
        retention_age = settings.retention_days * 86400.0
        return [
            StreamConfig(
                name=names.schedules_stream,
                subjects=[names.schedules_filter],
                description="AstraBox scheduler: Schedule events (applied/deleted/held/released)",
                **common,  # type: ignore[arg-type]
            ),
            StreamConfig(
                name=names.runs_stream,
                subjects=[names.runs_filter],
                description="AstraBox scheduler: Run events (created ... dispatched/failed)",
                **common,  # type: ignore[arg-type]
            ),
            StreamConfig(
                name=names.index_stream,
                subjects=[names.index_filter],
                description="AstraBox scheduler: history index, one entry per Run, newest kept",
                **{**common, "max_msgs_per_subject": settings.retention_runs,  # type: ignore[arg-type]
                   "max_age": retention_age,
                   "duplicate_window": min(120.0, retention_age)},
            ),
        ]

    async def ensure(self) -> None:
        """Create or verify the streams and the lease bucket (idempotent, race-safe)."""
        for config in self.stream_configs():
            await self.retrying(
                f"could not prepare {config.name}", lambda c=config: self._ensure_stream(c)
            )
        self._leases = await self.retrying("could not prepare the lease table", self._ensure_kv)

    async def _ensure_stream(self, wanted: StreamConfig) -> None:
        assert wanted.name is not None
        try:
            info = await self.js.stream_info(wanted.name)
        except nats.js.errors.NotFoundError:
            try:
                await self.js.add_stream(wanted)
                return
            except nats.js.errors.BadRequestError:
                info = await self.js.stream_info(wanted.name)  # another replica won the race
        if wanted.name == self.names.index_stream and limits_differ(wanted, info.config):
            # The retention settings changed: the index follows them (its limits ARE the
            # retention; the Run events are purged to match by the provider).
            info = await self.js.update_stream(wanted)
        if not info.config.allow_atomic:
            info = await self._allow_atomic(info.config) or info
        problems = incompatibilities(wanted, info.config)
        if problems:
            raise SchedulerConfigurationError(
                f"the scheduler store already holds the event log {wanted.name}, set up in a "
                f"way the scheduler cannot use: {'; '.join(problems)}"
            )

    async def _allow_atomic(self, config: StreamConfig) -> StreamInfo | None:
        """Upgrade a stream set up by an older release in place: atomic batches allowed.

        Additive (nothing stored changes; an older release publishes as before). Asked once,
        briefly: the shipped permissions let the scheduler create streams but not change
        them, so on such a store the request goes unanswered. Then the store works as before,
        one message at a time (:meth:`AckedPublisher.publish_batched` notices the refusal),
        and says how to upgrade it."""
        try:
            return await asyncio.wait_for(
                self.js.update_stream(replace(config, allow_atomic=True)), UPGRADE_TIMEOUT)
        except Exception as exc:
            log.warning("the event log %s predates atomic batches and could not be upgraded "
                        "(%s): it is written one message at a time, which is slower; an "
                        "administrator can turn its setting allow_atomic on",
                        config.name, exc)
            return None

    def leases_stream_config(self) -> StreamConfig:
        """The lease bucket's stream: what ``create_key_value`` makes, plus atomic batches."""
        return StreamConfig(
            name=self.names.leases_stream,
            description="AstraBox scheduler: one key per unfinished Run, holding its lease",
            subjects=[self.names.leases_filter], allow_rollup_hdrs=True, allow_msg_ttl=True,
            deny_delete=True, discard=DiscardPolicy.NEW, duplicate_window=120.0,
            max_consumers=-1, max_msgs=-1, max_msgs_per_subject=1,
            num_replicas=self.settings.replicas, storage=StorageType.FILE, allow_atomic=True,
        )

    async def _ensure_kv(self) -> KeyValue:
        bucket = self.names.leases_bucket
        try:
            kv = await self.js.key_value(bucket)
        except nats.js.errors.BucketNotFoundError:
            with contextlib.suppress(nats.js.errors.BadRequestError):  # another replica won
                await self.js.add_stream(self.leases_stream_config())
            kv = await self.js.key_value(bucket)
        # Open keys expire by their own TTL (jetstream/leases.py) and are opened in atomic
        # batches: a bucket made by an older release is upgraded in place when allowed.
        info = await self.js.stream_info(self.names.leases_stream)
        if not info.config.allow_msg_ttl:
            raise SchedulerConfigurationError(
                f"the scheduler store already holds the lease table {bucket}, set up in a way "
                "the scheduler cannot use: its entries cannot expire by themselves")
        if not info.config.allow_atomic:
            await self._allow_atomic(info.config)
        return kv

    @property
    def leases(self) -> KeyValue:
        assert self._leases is not None, "Store.ensure() first"
        return self._leases

    # ---------------------------------------------------------------- appends and reads

    async def append(
        self, subject: str, data: bytes, *, expected_seq: int, msg_id: str,
        retry_seconds: float | None = None,
    ) -> tuple[int, bool]:
        """Append if the subject's last sequence is ``expected_seq`` (0: subject empty).

        Returns (sequence, duplicate). Raises :class:`Conflict` when another writer got there
        first. ``duplicate`` means a message with this ``msg_id`` was already stored (ours,
        resent after a lost ack, or a replica's with the same deterministic ID).
        ``retry_seconds=0`` sends once: for a write whose decision must not be re-sent later
        (a scheduled Run's create, decided on a Schedule read that ages).
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
                last = await self._last(subject)
                if last is not None and last.msg_id == msg_id:
                    return last.seq, True
                raise Conflict(subject) from exc

        return await self.retrying("could not store an event", op, retry_seconds)

    async def publish(self, subject: str, data: bytes, *, msg_id: str) -> int:
        """Append unconditionally (de-duplicated by ``msg_id``); returns the sequence."""
        headers = {HDR_MSG_ID: msg_id}

        async def op() -> int:
            ack = await self.acks.publish(subject, data, headers)
            return ack.seq

        return await self.retrying("could not store an event", op)

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

    async def last_seq(self, stream: str) -> int:
        """The stream's last sequence, from its leader (0 when it holds nothing, or does not
        exist yet: a namespace no provider has prepared reads as empty)."""
        return await self.retrying("could not read", lambda: self.last_seq_once(stream))

    async def last_seq_once(self, stream: str) -> int:
        """:meth:`last_seq`, asked once: no retry, and a failure is raised as the client's
        own error, uncounted (for a caller with a fallback of its own)."""
        try:
            info = await self.js.stream_info(stream)
        except nats.js.errors.NotFoundError:
            self._answered()
            return 0
        except Exception as exc:
            await self._note_failure(exc)
            raise
        self._answered()
        return info.state.last_seq if info.state.messages else 0

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
            return await self.js.subscribe(
                filter_subject, stream=stream, cb=cb, ordered_consumer=True,
                idle_heartbeat=heartbeat, deliver_policy=DeliverPolicy.LAST_PER_SUBJECT)
        return await self.js.subscribe(
            filter_subject, stream=stream, cb=cb, ordered_consumer=True,
            idle_heartbeat=heartbeat, deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            config=ConsumerConfig(opt_start_seq=from_seq))

    @property
    def connected(self) -> bool:
        """Whether the connection is up now (a publish would not be buffered)."""
        return self.nc.is_connected

    @property
    def max_payload(self) -> int:
        """The server's largest message, in bytes (0 when not known)."""
        return int(self.nc.max_payload or 0)

    async def direct_batch(self, stream: str, request: dict[str, object]) -> list[Msg]:
        """A batched direct get (ADR-31): every message the request selects, in order.

        nats-py has no call for batched direct gets (its ``get_msg`` fetches one message), so
        this sends the server's ``$JS.API.DIRECT.GET`` request with a reply inbox and collects
        the answers up to the end-of-batch status (204). A batch may be answered by a stream
        follower (ADR-8): fine for history, which is read-only; decisions read the leader.
        """
        async def op() -> list[Msg]:
            inbox = self.nc.new_inbox()
            got: list[Msg] = []
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            async def collect(msg: Msg) -> None:
                status = (msg.headers or {}).get(HDR_STATUS)
                if status is None:
                    got.append(msg)
                elif done.done():
                    return
                elif status in ("204", "404", "503"):
                    # end of batch; nothing matched; no such stream (nothing stored yet)
                    done.set_result(None)
                else:  # e.g. 413 Too Many Results: never a silently short answer
                    done.set_exception(BatchRefused(status, (msg.headers or {}).get(
                        HDR_DESCRIPTION, "")))

            sub = await self.nc.subscribe(inbox, cb=collect)
            try:
                await self.nc.publish(direct_get_subject(stream),
                                      msgspec.json.encode(request), reply=inbox)
                await asyncio.wait_for(done, DIRECT_GET_TIMEOUT)
            finally:
                await sub.unsubscribe()
            return got

        return await self.retrying("could not read the history", op)

    async def purge_subject(
        self, stream: str, subject: str, *, before_seq: int | None = None
    ) -> None:
        """Remove the messages of ``subject`` (wildcards allowed): all of them, or those stored
        before ``before_seq``."""
        await self.retrying("could not apply the history retention",
                            lambda: self.js.purge_stream(stream, subject=subject, seq=before_seq))

    def _stream_of(self, subject: str) -> str:
        if self.names.is_run_subject(subject):
            return self.names.runs_stream
        return self.names.schedules_stream

    async def close(self) -> None:
        await self.acks.close()
        try:
            await asyncio.wait_for(self.nc.close(), 5.0)
        except Exception:  # closing a broken connection must not fail a stop()
            log.debug("closing the connection failed", exc_info=True)


def limits_differ(wanted: StreamConfig, actual: StreamConfig) -> bool:
    """Whether a stream's count and age limits differ from the wanted ones."""
    return (actual.max_msgs_per_subject, actual.max_age) != (
        wanted.max_msgs_per_subject, wanted.max_age)


def incompatibilities(wanted: StreamConfig, actual: StreamConfig) -> list[str]:
    """What in an existing event log's configuration would break the provider's guarantees.

    Phrased for the operator who must fix it, without the engine's vocabulary (docs/contract.md).
    """
    problems: list[str] = []
    missing = set(wanted.subjects or []) - set(actual.subjects or [])
    if missing:
        problems.append(f"it does not accept the event names {sorted(missing)}")
    if actual.retention not in (None, RetentionPolicy.LIMITS):
        problems.append("it deletes events once they are read, but events are the history")
    per_subject = actual.max_msgs_per_subject
    if per_subject not in (None, -1, wanted.max_msgs_per_subject):
        problems.append(f"it keeps only {per_subject} events per Run or Schedule, not all of them")
    if actual.discard not in (None, DiscardPolicy.OLD):
        problems.append("it refuses new events when full instead of ageing out old ones")
    if actual.storage not in (None, StorageType.FILE):
        problems.append("it keeps events in memory only, so Run IDs would not be durable")
    return problems

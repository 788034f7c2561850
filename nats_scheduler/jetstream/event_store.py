"""What the logs, the history, the followers and the runtime need of the store: Protocols.

:class:`~.store.Store` is the one implementation (JetStream). The Protocols name what each
kind of caller uses, so none reaches into the connection, the JetStream context or the
publisher behind it, and every write goes through the store's retry and failover policy
(:mod:`.retry`). They are derived from the call sites, one per role:

* :class:`EventLog` - conditional appends and leader reads (``runlog.py``, ``schedulelog.py``).
* :class:`HistoryStore` - the history index: entries, batched reads, purges (``history.py``,
  ``history_reads.py``).
* :class:`FollowedStore` - stream positions and ordered consumers (``follower.py``,
  ``runtime/freshness.py``).
* :class:`LeaseStore` - the lease bucket and its compare-and-set writes (``leases.py``).
* :class:`EventStore` - all of them, plus what the firing protocol asks of the connection
  (``runtime/firing.py``).

``names`` is in each: the namespace the store was opened on, which only formats names
(``names.py`` keeps no state).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple, Protocol, TypeVar

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from ..names import Names
from ..settings import NatsSettings
from .acks import Ack, Outgoing
from .decisions import DecisionNonces
from .direct import Answer, Request
from .foreign import ForeignLog

T = TypeVar("T")


@dataclass(frozen=True)
class StoredMessage:
    """One message of a subject, as the stream leader stored it."""

    subject: str
    seq: int
    data: bytes
    msg_id: str | None
    stored_at: datetime | None = None
    """The server's timestamp of storing it."""


Judge = Callable[[str, bytes], object]
"""Takes a stored message (its subject and body) as the provider's own, returning what it
holds, or raises :class:`~.foreign.ForeignMessage` (jetstream/foreign.py)."""


class SubjectTail(NamedTuple):
    """Where a subject ends, and its last message of ours (``Store.tail``)."""

    last_seq: int
    """The subject's last sequence, whatever it holds (0: empty): where an append goes."""
    ours: StoredMessage | None
    """Its last message the judge takes as ours (None: none is)."""


class EventLog(Protocol):
    """Conditional appends and leader reads: what the Run and Schedule logs write and read."""

    @property
    def names(self) -> Names: ...

    @property
    def foreign(self) -> ForeignLog:
        """Where readers count the foreign messages they skip (jetstream/foreign.py)."""
        ...

    @property
    def decisions(self) -> DecisionNonces:
        """This writer's decision nonces, for the Msg-Ids of later events."""
        ...

    async def retrying(self, what: str, op: Callable[[], Awaitable[T]],
                       retry_seconds: float | None = None) -> T:
        """``op`` under the store's retry policy (SchedulerUnavailable when time runs out)."""
        ...

    async def append(self, subject: str, data: bytes, *, expected_seq: int, msg_id: str,
                     retry_seconds: float | None = None,
                     judge: Judge | None = None) -> tuple[int, bool]:
        """Append if the subject's last sequence is ``expected_seq``: (sequence, duplicate);
        Conflict when another writer got there first. With ``judge``, foreign messages
        stored after ``expected_seq`` are stepped over (``Store.append``)."""
        ...

    async def tail(self, subject: str, judge: Judge, *, known: int = 0) -> SubjectTail:
        """The subject's last sequence and its last message of ours (``Store.tail``)."""
        ...

    async def publish_once(self, subject: str, data: bytes,
                           headers: dict[str, str] | None = None) -> Ack:
        """One publish, no retry, the client's own error (noted for failover)."""
        ...

    async def publish_many(self, messages: Sequence[Outgoing]) -> list[Ack | Exception]:
        """Pipelined publishes, one result per message (noted for failover)."""
        ...

    async def publish_atomic_or_each(self, stream: str, messages: Sequence[Outgoing], *,
                                     resend: Callable[[], bool]
                                     ) -> list[Ack | Exception] | Exception:
        """One atomic batch; refused, sent one by one only if ``resend()``, else the one
        failure of the whole batch."""
        ...

    async def last(self, subject: str, stream: str | None = None) -> StoredMessage | None:
        """The leader's last message of ``subject`` (wildcards allowed), or None."""
        ...

    async def next(self, subject: str, from_seq: int = 1) -> StoredMessage | None:
        """The leader's first message of ``subject`` at or after ``from_seq``, or None."""
        ...


class HistoryStore(Protocol):
    """The history index: its entries written, read in batches, and its retention applied."""

    @property
    def names(self) -> Names: ...

    @property
    def foreign(self) -> ForeignLog:
        """Where readers count the foreign messages they skip (jetstream/foreign.py)."""
        ...

    @property
    def settings(self) -> NatsSettings:
        """The retention settings live here (``retention_days``, ``retention_runs``)."""
        ...

    async def append(self, subject: str, data: bytes, *, expected_seq: int, msg_id: str,
                     retry_seconds: float | None = None,
                     judge: Judge | None = None) -> tuple[int, bool]:
        """A conditional append (:meth:`EventLog.append`): the index writer's compare-and-set."""
        ...

    async def tail(self, subject: str, judge: Judge, *, known: int = 0) -> SubjectTail:
        """The subject's last sequence and its last message of ours (``Store.tail``)."""
        ...

    async def publish_batched(self, stream: str,
                              messages: Sequence[Outgoing]) -> list[Ack | Exception]: ...

    async def publish_atomic(self, stream: str,
                             messages: Sequence[Outgoing]) -> list[Ack] | Exception:
        """One atomic batch: an acknowledgement per message, or the whole batch's failure."""
        ...

    async def direct_batch(self, stream: str, request: dict[str, object]) -> list[Msg]: ...

    async def direct_many(self, requests: Sequence[Request]) -> list[Answer]: ...

    async def last(self, subject: str, stream: str | None = None) -> StoredMessage | None: ...

    async def next(self, subject: str, from_seq: int = 1) -> StoredMessage | None: ...

    async def last_seq(self, stream: str) -> int: ...

    async def purge_subject(self, stream: str, subject: str, *,
                            before_seq: int | None = None) -> None: ...


class FollowedStore(Protocol):
    """Where a stream ends, and an ordered consumer of it: what projections follow."""

    @property
    def names(self) -> Names: ...

    @property
    def foreign(self) -> ForeignLog:
        """Where readers count the foreign messages they skip (jetstream/foreign.py)."""
        ...

    async def last_seq(self, stream: str) -> int: ...

    async def last_seq_once(self, stream: str) -> int:
        """:meth:`last_seq` asked once, the client's own error raised (for a fallback)."""
        ...

    async def follow(
        self, stream: str, filter_subject: str, cb: Callable[[Msg], Awaitable[None]],
        *, heartbeat: float, from_seq: int | None = None,
    ) -> JetStreamContext.PushSubscription: ...


class LeaseStore(Protocol):
    """The lease bucket, and the writes of its compare-and-set protocol (``leases.py``)."""

    @property
    def names(self) -> Names: ...

    @property
    def leases(self) -> KeyValue:
        """The bucket, for its reads, creates and purges (nats-py's KV calls)."""
        ...

    async def publish_grouped(self, stream: str, subject: str, data: bytes,
                              headers: dict[str, str] | None = None) -> Ack: ...

    async def publish_batched(self, stream: str,
                              messages: Sequence[Outgoing]) -> list[Ack | Exception]: ...

    async def follow(
        self, stream: str, filter_subject: str, cb: Callable[[Msg], Awaitable[None]],
        *, heartbeat: float, from_seq: int | None = None,
    ) -> JetStreamContext.PushSubscription:
        """An ordered consumer: the last message per subject, then every new one."""
        ...


class EventStore(EventLog, HistoryStore, FollowedStore, LeaseStore, Protocol):
    """Every role at once, plus what the firing protocol asks of the connection."""

    @property
    def retry_seconds(self) -> float:
        """The retry budget of one operation (``store_retry_seconds``)."""
        ...

    @property
    def connected(self) -> bool:
        """Whether the connection is up now (a publish would not be buffered)."""
        ...

"""Acknowledged publishes, pipelined: many in flight, one reply subscription, no timer each.

Every event the provider stores is a JetStream publish that waits for its acknowledgement.
nats-py's ``js.publish`` makes each of them a request with its own timeout (two extra futures
and a timer per message) and decodes the acknowledgement into a dataclass; measured on this
machine that halves the rate at which one process can store events (docs/benchmarks.md:
gathered ``js.publish`` against ``publish_async``). ``js.publish_async`` is cheaper but has
no timeout at all: an acknowledgement lost in a reconnect would leave its caller waiting for
ever.

:class:`AckedPublisher` keeps nats-py's cheap shape (one wildcard reply subscription, a future
per message keyed by a short token) and adds the missing timeout as one sweep over the
pending messages, a few times a second, instead of a timer per message. The acknowledgement
is decoded by msgspec into the three fields the store uses. Errors are nats-py's own
(``APIError`` subclasses from the server's error, ``TimeoutError``, ``NoStreamResponseError``),
so :mod:`.errors` classifies them like any other call's.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections.abc import Callable, Sequence

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from ..names import (
    HDR_BATCH_COMMIT,
    HDR_BATCH_ID,
    HDR_BATCH_SEQUENCE,
    HDR_STATUS,
    inbox_filter,
    inbox_reply_prefix,
)
from ..tasks import cancel_and_wait
from . import errors

log = logging.getLogger(__name__)

class Outgoing(msgspec.Struct, frozen=True, gc=False):
    """One message to store: its subject, data and headers.

    Not tracked by the garbage collector (a string, bytes and a dict of strings can make no
    cycle). A reconcile keeps thousands in flight for a round trip each; as tuples holding a
    dict (a tuple with a dict in it is never untracked) they reached the collector's oldest
    generation and set off a full collection for every ten thousand or so, each walking
    every Schedule of a million (docs/benchmarks.md, "A million Schedules")."""

    subject: str
    data: bytes
    headers: dict[str, str] | None = None

SWEEP_SECONDS = 0.25
"""How often pending publishes are checked against their timeout (the timeout's resolution)."""

MAX_ATOMIC = 1000
"""Messages one atomic batch may hold (the server's limit, ADR-50)."""

ATOMIC_MIN = 64
"""Fewer messages than this go as pipelined publishes, not as an atomic batch (the server's
fsync interval not declared: :data:`ATOMIC_MIN_SYNC_ALWAYS` when it is ``always``).

On nats-server 2.15.1 an atomic batch costs the server a sync: 6-9 ms for 2 to 100 messages
on this machine whatever the fsync setting, batches to one stream one after the other. With
``sync_interval: always`` every plain publish pays a sync too, so batches win at any size;
on the default interval a small batch loses to pipelined publishes (0.9 ms each, many in
flight). From 64 messages on a batch wins on both (bench/firing.py at 5,000 Runs, both
settings; docs/architecture.md, "Firing at scale")."""

ATOMIC_MIN_SYNC_ALWAYS = 16
""":data:`ATOMIC_MIN` for a server declared to sync every write (the setting
``server_sync_always``): there a plain publish waits for its own sync, so smaller batches
win. Run now with 64 callers on ``sync_interval: always`` (bench/firing.py --enqueue,
2026-12-04): 1,891 Runs/s from 16 messages on, 1,800/s from 2, 1,596/s from 64. On the
default interval the same thresholds cost Run now 26 % (1,870/s from 16 against 2,527/s
from 64), hence a declared setting, not one threshold for both."""

GROUP_MAX = 256
"""Publishes :meth:`AckedPublisher.publish_grouped` gathers into one batch at most."""

class _ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class Ack(msgspec.Struct):
    """The server's acknowledgement of one stored message (or its refusal).

    The commit of an atomic batch is acknowledged once, for all of it: ``seq`` is the
    sequence of its last message, ``count`` how many it stored (contiguous sequences)."""

    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: _ApiError | None = None
    batch: str = ""
    count: int = 0


_decode_ack = msgspec.json.Decoder(Ack).decode


def _refusal(error: _ApiError) -> Exception:
    """nats-py's exception for a server error (``from_error`` raises rather than returns)."""
    try:
        nats.js.errors.APIError.from_error(msgspec.structs.asdict(error))
    except nats.js.errors.APIError as exc:
        return exc
    return nats.js.errors.APIError(code=error.code, description=error.description)


class AckedPublisher:
    """Publish to JetStream and await each acknowledgement, many at a time."""

    def __init__(self, nc: Client, *, timeout: float = 2.0,
                 atomic_min: int | None = None) -> None:
        self._nc = nc
        self._timeout = timeout
        self._atomic_min = ATOMIC_MIN if atomic_min is None else atomic_min
        """Groups this large or larger go as an atomic batch (:data:`ATOMIC_MIN`)."""
        self._prefix = ""
        self._tokens = itertools.count(1)
        self._pending: dict[str, tuple[asyncio.Future[Ack], float]] = {}
        self._sub: Subscription | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._starting: asyncio.Lock | None = None
        self._batch_prefix = secrets.token_hex(8)
        self._groups: dict[str, list[tuple[Outgoing, asyncio.Future[Ack | Exception]]]] = {}
        self._sending: set[asyncio.Task[None]] = set()
        self.not_atomic: set[str] = set()
        """Streams that refused an atomic batch: sent one message at a time from then on."""
        self.batches_atomic = 0
        """Atomic batches stored."""
        self.batches_split = 0
        """Atomic batches refused and sent again one message at a time."""

    async def _start(self) -> None:
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._sub is not None:
                return
            inbox = self._nc.new_inbox()
            self._sub = await self._nc.subscribe(inbox_filter(inbox), cb=self._on_reply)
            self._prefix = inbox_reply_prefix(inbox)
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="ack timeouts")

    async def publish(self, subject: str, data: bytes,
                      headers: dict[str, str] | None = None) -> Ack:
        """Store one message; its acknowledgement, or nats-py's error for the refusal."""
        if self._sub is None:
            await self._start()
        token = str(next(self._tokens))
        future: asyncio.Future[Ack] = asyncio.get_running_loop().create_future()
        self._pending[token] = (future, time.monotonic() + self._timeout)
        try:
            await self._nc.publish(subject, data, reply=self._prefix + token,
                                   headers=headers)
            return await future
        finally:
            self._pending.pop(token, None)

    async def publish_many(self, messages: Sequence[Outgoing]) -> list[Ack | Exception]:
        """Store many messages: all are sent, then every acknowledgement is awaited.

        One result per message, in order: its acknowledgement, or the exception that refused
        or lost it (never raised: each caller decides what a failure of one item means). No
        task per message: the batch costs one coroutine however long it is.
        """
        if self._sub is None:
            await self._start()
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + self._timeout
        sent: list[tuple[str, asyncio.Future[Ack]]] = []
        failure: Exception | None = None
        for message in messages:
            token = str(next(self._tokens))
            future: asyncio.Future[Ack] = loop.create_future()
            sent.append((token, future))
            if failure is not None:
                future.set_exception(failure)
                continue
            self._pending[token] = (future, deadline)
            try:
                await self._nc.publish(message.subject, message.data,
                                       reply=self._prefix + token, headers=message.headers)
            except Exception as exc:  # the connection closed: the rest fail alike
                failure = exc
                future.set_exception(exc)
        results: list[Ack | Exception] = []
        for token, future in sent:
            try:
                results.append(await future)
            except Exception as exc:
                results.append(exc)
            finally:
                self._pending.pop(token, None)
        return results

    async def publish_atomic(self, messages: Sequence[Outgoing]) -> list[Ack] | Exception:
        """Store ``messages`` (one stream) as one atomic batch (ADR-50): all or nothing.

        One acknowledgement for the whole batch, one fsync on the server, one future here.
        Returns an acknowledgement per message (their sequences are contiguous), or the
        exception that refused or lost the batch: then NONE of it was stored, except after
        a timeout, when the outcome is unknown (callers resend one by one, with the same
        ``Nats-Msg-Id`` and expectations, which settles it). One expectation that fails
        (a lost race on one subject) refuses the whole batch; so does a ``Nats-Msg-Id``
        already stored. Never raised: each caller decides what a refusal means.
        """
        if not messages:
            return []
        if len(messages) > MAX_ATOMIC:
            raise ValueError(f"an atomic batch holds at most {MAX_ATOMIC} messages")
        if self._sub is None:
            await self._start()
        token = str(next(self._tokens))
        batch_id = f"{self._batch_prefix}{token}"  # unique per publisher and batch
        future: asyncio.Future[Ack] = asyncio.get_running_loop().create_future()
        self._pending[token] = (future, time.monotonic() + self._timeout)
        last = len(messages)
        try:
            for number, message in enumerate(messages, 1):
                batch_headers = {**(message.headers or {}), HDR_BATCH_ID: batch_id,
                                 HDR_BATCH_SEQUENCE: str(number)}
                if number == last:
                    batch_headers[HDR_BATCH_COMMIT] = "1"
                await self._nc.publish(message.subject, message.data, headers=batch_headers,
                                       reply=self._prefix + token if number == last else "")
            ack = await future
        except Exception as exc:
            return exc
        finally:
            self._pending.pop(token, None)
        first = ack.seq - last + 1
        return [Ack(stream=ack.stream, seq=first + i) for i in range(last)]

    async def publish_batched(self, stream: str, messages: Sequence[Outgoing]
                              ) -> list[Ack | Exception]:
        """:meth:`publish_many`, sent as one atomic batch while the stream takes them.

        A batch the server refuses (one lost race, a resent ``Nats-Msg-Id``) is sent again
        one message at a time, pipelined, which gives each message its own answer: the
        batch costs one round trip when nothing races, what it cost before when something
        does. A batch left unanswered (a timeout: its outcome is unknown) gives every item
        that failure, as a lone publish would. A stream that does not allow atomic batches
        gets pipelined publishes from then on.
        """
        if self._atomic_min <= len(messages) <= MAX_ATOMIC and stream not in self.not_atomic:
            acks = await self.publish_atomic(messages)
            if not isinstance(acks, Exception):
                self.batches_atomic += 1
                return list(acks)
            if not self.refused(stream, acks):
                # no answer (a timeout, the connection): every item gets it, to be retried
                # by its caller as a lone publish would be, not resent here at once
                return [acks] * len(messages)
        return await self.publish_many(messages)

    async def publish_atomic_or_each(
        self, stream: str, messages: Sequence[Outgoing], *, resend: Callable[[], bool]
    ) -> list[Ack | Exception] | Exception:
        """Two or more messages as one atomic batch while the stream takes them; one alone,
        or on a stream that does not, as :meth:`publish_many` (a result per message).

        For writes each decided once (the creates of a busy minute, runtime/firing.py): a
        batch the server refuses (one lost race refuses it all) is sent again one message
        at a time only if ``resend()`` says the decision behind it still holds. Otherwise,
        and when the batch went unanswered, that one failure is returned for the whole
        batch: nothing of it was sent again, its caller decides every item anew. Unlike
        :meth:`publish_batched`, atomic from two messages on.
        """
        batch = (await self.publish_atomic(messages)
                 if len(messages) > 1 and stream not in self.not_atomic else None)
        if batch is None or isinstance(batch, Exception):
            if batch is not None and (not self.refused(stream, batch) or not resend()):
                return batch
            return await self.publish_many(messages)
        self.batches_atomic += 1
        return list(batch)

    def refused(self, stream: str, failure: Exception) -> bool:
        """Whether an atomic batch's ``failure`` is the server's refusal of it (then nothing
        of it was stored and its items may be sent again one by one), counted as a split."""
        if not isinstance(failure, nats.js.errors.APIError):
            return False
        if errors.is_atomic_disabled(failure):
            log.warning("%s does not take atomic batches; publishing one by one", stream)
            self.not_atomic.add(stream)
        self.batches_split += 1
        return True

    async def publish_grouped(self, stream: str, subject: str, data: bytes,
                              headers: dict[str, str] | None = None) -> Ack:
        """:meth:`publish`, gathered with the other publishes to ``stream`` made in the same
        turn of the event loop into one atomic batch (:meth:`publish_batched`).

        For writes of many independent tasks that each wait for their own answer (the
        dispatcher's events of many Runs): they share one acknowledgement and, with
        ``sync_interval: always``, one fsync. A refused batch is sent again one message at a
        time, so each caller gets exactly the answer a lone publish would have got.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Ack | Exception] = loop.create_future()
        group = self._groups.get(stream)
        if group is None:
            group = self._groups[stream] = []
            loop.call_soon(self._flush, stream)
        group.append((Outgoing(subject, data, headers), future))
        if len(group) >= GROUP_MAX:
            self._flush(stream)
        result = await future
        if isinstance(result, Exception):
            raise result
        return result

    def _flush(self, stream: str) -> None:
        group = self._groups.pop(stream, None)
        if not group:
            return
        task = asyncio.get_running_loop().create_task(self._send_group(stream, group))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send_group(
        self, stream: str, group: list[tuple[Outgoing, asyncio.Future[Ack | Exception]]]
    ) -> None:
        try:
            results = await self.publish_batched(stream, [message for message, _ in group])
        except Exception as exc:  # pragma: no cover - publish_batched returns its failures
            results = [exc] * len(group)
        for (_, future), result in zip(group, results, strict=True):
            if not future.done():
                future.set_result(result)

    async def _on_reply(self, msg: Msg) -> None:
        pending = self._pending.get(msg.subject[len(self._prefix):])
        if pending is None or pending[0].done():
            return  # timed out already, or a duplicate reply
        future = pending[0]
        if msg.headers and msg.headers.get(HDR_STATUS) == "503":
            future.set_exception(nats.js.errors.NoStreamResponseError())
            return
        try:
            ack = _decode_ack(msg.data)
        except msgspec.DecodeError as exc:
            future.set_exception(nats.js.errors.Error(f"unreadable acknowledgement: {exc}"))
            return
        if ack.error is not None:
            future.set_exception(_refusal(ack.error))
        else:
            future.set_result(ack)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            now = time.monotonic()
            for future, deadline in list(self._pending.values()):
                if deadline <= now and not future.done():
                    future.set_exception(nats.errors.TimeoutError())

    async def close(self) -> None:
        """Stop the timeout sweep; publishes still pending fail with a timeout."""
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            await cancel_and_wait([sweeper], timeout=1.0)
        for future, _ in list(self._pending.values()):
            if not future.done():
                future.set_exception(nats.errors.TimeoutError())

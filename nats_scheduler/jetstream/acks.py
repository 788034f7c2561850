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
so :mod:`.errors` classifies them as before.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Sequence

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from ..tasks import cancel_and_wait

log = logging.getLogger(__name__)

Outgoing = tuple[str, bytes, "dict[str, str] | None"]
"""(subject, data, headers) of one message to store."""

SWEEP_SECONDS = 0.25
"""How often pending publishes are checked against their timeout (the timeout's resolution)."""


class _ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class Ack(msgspec.Struct):
    """The server's acknowledgement of one stored message (or its refusal)."""

    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: _ApiError | None = None


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

    def __init__(self, nc: Client, *, timeout: float = 2.0) -> None:
        self._nc = nc
        self._timeout = timeout
        self._prefix = ""
        self._tokens = itertools.count(1)
        self._pending: dict[str, tuple[asyncio.Future[Ack], float]] = {}
        self._sub: Subscription | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._starting: asyncio.Lock | None = None

    async def _start(self) -> None:
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._sub is not None:
                return
            inbox = self._nc.new_inbox()
            self._sub = await self._nc.subscribe(f"{inbox}.*", cb=self._on_reply)
            self._prefix = f"{inbox}."
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
        for subject, data, headers in messages:
            token = str(next(self._tokens))
            future: asyncio.Future[Ack] = loop.create_future()
            sent.append((token, future))
            if failure is not None:
                future.set_exception(failure)
                continue
            self._pending[token] = (future, deadline)
            try:
                await self._nc.publish(subject, data, reply=self._prefix + token,
                                       headers=headers)
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

    async def _on_reply(self, msg: Msg) -> None:
        pending = self._pending.get(msg.subject[len(self._prefix):])
        if pending is None or pending[0].done():
            return  # timed out already, or a duplicate reply
        future = pending[0]
        if msg.headers and msg.headers.get("Status") == "503":
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

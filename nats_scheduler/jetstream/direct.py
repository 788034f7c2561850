"""Batched direct gets (ADR-31) on one standing reply subscription, several per flush.

nats-py has no call for batched direct gets, and a subscription per read (subscribe, one
request, unsubscribe) costs a SUB and an UNSUB line and a task per read: on this machine
about as much as the read itself. :class:`DirectReader` subscribes once to a wildcard inbox
and routes each answer by its last token, like the acknowledgements of
:mod:`nats_scheduler.jetstream.acks`. :meth:`DirectReader.get_many` sends several requests
that do not depend on each other in one go, so they cost one round trip to the server
together (a page of the history: :mod:`nats_scheduler.jetstream.history_reads`).

An answer ends with its end-of-batch status (204), or is a status alone: 404 (nothing
matched) and 503 (no such stream: nothing stored yet) read as empty; any other status (e.g.
413 Too Many Results) fails the read with :class:`DirectRefused`, never a silently short
answer.
"""

from __future__ import annotations

import asyncio
import itertools
import weakref
from collections.abc import Mapping, Sequence

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from ..names import (
    HDR_DESCRIPTION,
    HDR_LAST_SEQUENCE,
    HDR_NUM_PENDING,
    HDR_STATUS,
    direct_get_subject,
    inbox_filter,
    inbox_reply_prefix,
)

Request = tuple[str, Mapping[str, object]]
"""A stream name and its direct get request (``seq``, ``next_by_subj``, ``multi_last``, ...)."""

_EMPTY_ANSWERS = frozenset({"404", "503"})


class DirectRefused(Exception):
    """The server refused a batched read (its status and description)."""

    def __init__(self, status: str, description: str) -> None:
        super().__init__(f"{status} {description}".strip())
        self.status = status


class Answer:
    """The messages of one batched read, and its end-of-batch headers."""

    __slots__ = ("_done", "end", "messages", "single")

    def __init__(self, done: asyncio.Future[None], single: bool) -> None:
        self.messages: list[Msg] = []
        self.single = single
        """A request without ``batch`` or ``multi_last``: one message answers it."""
        self.end: dict[str, str] = {}
        """The end-of-batch status message's headers (``Nats-Last-Sequence``, ...)."""
        self._done = done

    @property
    def last_seq(self) -> int:
        """The stream sequence of the last message sent (0 when none was)."""
        return int(self.end.get(HDR_LAST_SEQUENCE, 0) or 0)

    @property
    def pending(self) -> int:
        """Matching messages the batch left unsent (its ``Nats-Num-Pending``)."""
        return int(self.end.get(HDR_NUM_PENDING, 0) or 0)


_READERS: weakref.WeakKeyDictionary[Client, DirectReader] = weakref.WeakKeyDictionary()


def reader_of(nc: Client) -> DirectReader:
    """The one :class:`DirectReader` of a connection: every store and tool sharing a
    connection shares its standing subscription (the admin tools open a store per query)."""
    reader = _READERS.get(nc)
    if reader is None:
        reader = _READERS[nc] = DirectReader(nc)
    return reader


class DirectReader:
    """Batched direct gets of one connection, answered on one standing subscription."""

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._prefix = ""
        self._tokens = itertools.count(1)
        self._pending: dict[str, Answer] = {}
        self._sub: Subscription | None = None
        self._starting: asyncio.Lock | None = None

    async def _start(self) -> None:
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if self._sub is None:
                inbox = self._nc.new_inbox()
                self._sub = await self._nc.subscribe(inbox_filter(inbox), cb=self._on_reply)
                self._prefix = inbox_reply_prefix(inbox)

    async def get_many(self, requests: Sequence[Request], timeout: float) -> list[Answer]:
        """Send every request at once, then await every answer (one per request, in order).

        Raises :class:`DirectRefused` for a refused request, ``asyncio.TimeoutError`` when
        the answers take longer than ``timeout`` seconds in all.
        """
        if self._sub is None:
            await self._start()
        loop = asyncio.get_running_loop()
        sent: list[tuple[str, Answer]] = []
        try:
            for stream, request in requests:
                token = str(next(self._tokens))
                answer = Answer(loop.create_future(),
                                "batch" not in request and "multi_last" not in request)
                self._pending[token] = answer
                sent.append((token, answer))
                await self._nc.publish(direct_get_subject(stream),
                                       msgspec.json.encode(request),
                                       reply=self._prefix + token)
            async with asyncio.timeout(timeout):
                for _, answer in sent:
                    await answer._done
        finally:
            for token, _ in sent:
                self._pending.pop(token, None)
        return [answer for _, answer in sent]

    async def _on_reply(self, msg: Msg) -> None:
        answer = self._pending.get(msg.subject[len(self._prefix):])
        if answer is None or answer._done.done():
            return  # timed out already
        headers = msg.headers
        status = headers.get(HDR_STATUS) if headers else None
        if status is None:
            answer.messages.append(msg)
            if answer.single:
                answer._done.set_result(None)
        elif status == "204" or status in _EMPTY_ANSWERS:
            answer.end = headers or {}
            answer._done.set_result(None)
        else:
            answer._done.set_exception(DirectRefused(status, (headers or {}).get(
                HDR_DESCRIPTION, "")))

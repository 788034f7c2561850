"""One batched direct get (ADR-31) on a reply inbox of its own.

nats-py has no call for batched direct gets (its ``get_msg`` fetches one message), so this
sends the server's ``$JS.API.DIRECT.GET`` request with a reply inbox and collects the
answers up to the end-of-batch status (204). A batch may be answered by a stream follower
(ADR-8): fine for history, which is read-only; decisions read the leader (``Store.last``).

Each read here subscribes to an inbox of its own for its answers; the pipelined page reads of
:mod:`.history_reads` share the standing subscription of :mod:`.direct` instead. The store
retries a read that failed (``Store.direct_batch``): this module sends one.
"""

from __future__ import annotations

import asyncio

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg

from ..names import HDR_DESCRIPTION, HDR_STATUS, direct_get_subject

DIRECT_GET_TIMEOUT = 2.0
"""Seconds a batched read may take before it counts as a transient failure."""


class BatchRefused(Exception):
    """The server refused a batched read (its status and description)."""

    def __init__(self, status: str, description: str) -> None:
        super().__init__(f"{status} {description}".strip())
        self.status = status


async def direct_batch_once(nc: Client, stream: str, request: dict[str, object]) -> list[Msg]:
    """Every message ``request`` selects from ``stream``, in order; one attempt.

    404 (nothing matched) and 503 (no such stream: nothing stored yet) read as empty; any
    other status (e.g. 413 Too Many Results) raises :class:`BatchRefused`, never a silently
    short answer. ``asyncio.TimeoutError`` after :data:`DIRECT_GET_TIMEOUT` seconds.
    """
    inbox = nc.new_inbox()
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

    sub = await nc.subscribe(inbox, cb=collect)
    try:
        await nc.publish(direct_get_subject(stream), msgspec.json.encode(request), reply=inbox)
        await asyncio.wait_for(done, DIRECT_GET_TIMEOUT)
    finally:
        await sub.unsubscribe()
    return got

"""A subject's last message of ours, past the foreign ones stored after it.

Every event carries its aggregate's state after it, so a Schedule, a Run or a history is its
subject's last message of ours. When the subject's last message is foreign (not ours:
jetstream/foreign.py), the one before it that is ours is found here: read in batches, which
a stream follower may answer (ADR-8) but whose every message exists, then confirmed on the
stream leader from the last candidate on, so the answer is the leader's word. In the usual
case (one foreign message on top of a current follower) that is one batched read and one
leader read; the reads are the store's (``Store.tail``), passed in.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nats.aio.msg import Msg

from ..names import HDR_MSG_ID, HDR_SEQUENCE, HDR_SUBJECT
from .event_store import Judge, StoredMessage, SubjectTail
from .foreign import ForeignMessage

TAIL_BATCH = 256
"""Messages of one subject a search reads per batched request."""


def stored_of(msg: Msg) -> StoredMessage:
    """A message of a batched direct get, as the leader reads return them."""
    headers = msg.headers or {}
    return StoredMessage(
        subject=headers.get(HDR_SUBJECT, msg.subject or ""),
        seq=int(headers.get(HDR_SEQUENCE, 0)),
        data=msg.data or b"",
        msg_id=headers.get(HDR_MSG_ID),
    )


async def find_tail(
    subject: str, judge: Judge, *, known: int,
    last: Callable[[], Awaitable[StoredMessage | None]],
    leader: Callable[[int], Awaitable[StoredMessage | None]],
    batch: Callable[[dict[str, object]], Awaitable[list[Msg]]],
    foreign: Callable[[StoredMessage, str], None],
) -> SubjectTail:
    """The subject's last sequence and its last message ``judge`` takes.

    ``last()`` and ``leader(from_seq)`` read the stream leader (the subject's last message;
    its first at or after a sequence), ``batch(request)`` is a batched direct get, and
    ``foreign`` hears of each message skipped with why. ``known``: a position at or before
    the last message of ours, when the caller knows one (0: search from the start).
    """
    def ours(stored: StoredMessage) -> bool:
        try:
            judge(stored.subject, stored.data)
        except ForeignMessage as exc:
            foreign(stored, exc.reason)
            return False
        return True

    top = await last()
    if top is None:
        return SubjectTail(0, None)
    if ours(top):
        return SubjectTail(top.seq, top)
    found: StoredMessage | None = None
    read_to = seq = max(1, known)
    read_to -= 1  # every message of the subject up to here is judged
    while seq < top.seq:
        stored = [stored_of(msg) for msg in await batch(
            {"seq": seq, "next_by_subj": subject, "batch": TAIL_BATCH})]
        for message in stored:
            if message.seq < top.seq:
                read_to = message.seq
                if ours(message):
                    found = message
        if len(stored) < TAIL_BATCH or stored[-1].seq >= top.seq:
            break
        seq = stored[-1].seq + 1
    if found is None and known > 1:  # the hint was wrong: search from the start
        return await find_tail(subject, judge, known=0, last=last, leader=leader,
                               batch=batch, foreign=foreign)
    # The leader's word on what lies between the batches' last message and the top: a
    # follower's log is a prefix of the leader's, so up to ``read_to`` nothing is missing.
    seq = read_to + 1
    while seq < top.seq:
        message = await leader(seq)
        if message is None or message.seq >= top.seq:
            break
        if ours(message):
            found = message
        seq = message.seq + 1
    return SubjectTail(top.seq, found)

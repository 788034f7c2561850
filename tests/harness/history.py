"""Read the stored event history back, with the server's timestamps, for tests and benches.

Multi-process tests prove "who wrote what, and when" from the store itself, not from what
the processes report: every event names its ``actor`` (the writing process's identity), and
the server stamps each message with the time it stored it. This reads a subject (wildcards
allowed) message by message from the stream leader, oldest first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import nats.js.errors
from nats.js import JetStreamContext

from nats_scheduler.core.events import AnyEvent, decode_event
from nats_scheduler.names import Names

__all__ = ["StoredEvent", "deployment_run_history", "run_history", "subject_history"]


@dataclass(frozen=True)
class StoredEvent:
    """One stored event: stream sequence, subject, server time of storing, decoded event."""

    seq: int
    subject: str
    stored_at: datetime
    event: AnyEvent

    @property
    def type(self) -> str:
        """The event's tag, e.g. ``run.claimed``."""
        return str(type(self.event).__struct_config__.tag)


async def subject_history(js: JetStreamContext, stream: str, subject: str) -> list[StoredEvent]:
    """Every message of ``subject`` in ``stream``, oldest first (one leader read each)."""
    out: list[StoredEvent] = []
    seq = 1
    while True:
        try:
            msg = await js.get_msg(stream, seq=seq, subject=subject, next=True)
        except nats.js.errors.NotFoundError:
            return out
        assert msg.seq is not None and msg.time is not None and msg.data is not None
        out.append(StoredEvent(msg.seq, msg.subject or subject, msg.time,
                               decode_event(msg.data)))
        seq = msg.seq + 1


async def run_history(js: JetStreamContext, prefix: str, deployment_id: str,
                      run_id: str) -> list[StoredEvent]:
    """The events of one Run, oldest first."""
    names = Names(prefix)
    return await subject_history(js, names.runs_stream,
                                 names.run_subject(deployment_id, run_id))


async def deployment_run_history(js: JetStreamContext, prefix: str,
                                 deployment_id: str) -> list[StoredEvent]:
    """The events of every Run of one deployment, in stream order."""
    names = Names(prefix)
    return await subject_history(js, names.runs_stream,
                                 names.deployment_runs_filter(deployment_id))

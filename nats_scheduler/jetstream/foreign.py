"""Foreign messages: what a reader finds on the scheduler's subjects and cannot take as ours.

Only the provider's login may write into the scheduler's streams and buckets
(``nats-server.conf``), yet a message there can still be one no reader can take as the
provider's own: one published by hand with that login, an event type of a newer release,
bytes damaged on disk, or a valid event filed under another Schedule or Run than its subject
names. Every reader treats such a message as *foreign*:

- it skips it and goes on with the last message of the subject it can take
  (``Store.tail``): a Schedule or Run is its last message that is ours;
- a writer appends after it (on the subject's last sequence, whatever that holds), so no
  foreign message wedges a Schedule, a Run, a history or a lease;
- it counts it once (the metric ``astrabox.scheduler.events.skipped``, by stream) and logs
  a warning once per subject (:class:`ForeignLog`);
- ``nats-scheduler check`` and ``doctor`` name it by stream, subject and sequence.

The functions below decide what is ours on each kind of subject; they do no I/O.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import TypeVar

import msgspec

from ..core.events import (
    OutageEventType,
    RunEventType,
    ScheduleEventType,
    decode_outage_event,
    decode_run_event,
    decode_schedule_event,
)
from ..names import Names, untoken
from ..ports.foreign import ForeignMessage as ForeignMessage  # raised here, named in the port
from ..ports.history import IndexEntry
from ..ports.leases import LeaseValue

log = logging.getLogger(__name__)
T = TypeVar("T")

SEEN_KEPT = 10_000
"""Foreign messages (by subject and sequence) remembered as counted, and subjects warned of:
a reader that meets the same one again counts and warns no more, and a flood of them costs
a bounded memory."""


def reason_of(exc: Exception) -> str:
    """Why a message is foreign, from the decoder's error: short, one line."""
    text = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
    return f"{type(exc).__name__} {text}".rstrip()


def _last_token(subject: str) -> str:
    return untoken(subject.rsplit(".", 1)[-1])


def _decoded(decode: Callable[[bytes], T], subject: str, data: bytes) -> T:
    """``decode(data)``, or :class:`ForeignMessage` with the decoder's reason."""
    try:
        return decode(data)
    except (msgspec.DecodeError, ValueError) as exc:
        raise ForeignMessage(subject, reason_of(exc)) from exc


def schedule_event_on(subject: str, data: bytes) -> ScheduleEventType:
    """The Schedule event stored on ``subject`` (``<P>.sched.<deployment>``), or
    :class:`ForeignMessage`: not an event this release knows, or one of another deployment."""
    event = _decoded(decode_schedule_event, subject, data)
    try:
        filed_under = _last_token(subject)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ForeignMessage(subject, "not a deployment's subject") from exc
    if event.schedule.deployment_id != filed_under:
        raise ForeignMessage(subject, f"an event of deployment "
                                      f"{event.schedule.deployment_id!r} filed under another")
    return event


def run_event_on(names: Names, subject: str, data: bytes) -> RunEventType:
    """The Run event stored on ``subject`` (``<P>.run.<deployment>.<run>``), or
    :class:`ForeignMessage`: not an event this release knows, or one of another Run."""
    event = _decoded(decode_run_event, subject, data)
    try:
        ids = names.run_ids_of_subject(subject)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ForeignMessage(subject, "not a Run's subject") from exc
    run = event.run
    if (run.deployment_id, run.run_id) != ids:
        raise ForeignMessage(subject, f"an event of run {run.run_id!r} filed under another")
    return event


_index_entry = msgspec.json.Decoder(IndexEntry).decode


def index_entry_on(subject: str, data: bytes) -> IndexEntry:
    """The history index entry stored on ``subject`` (``<P>.runidx.<deployment>``), or
    :class:`ForeignMessage`."""
    return _decoded(_index_entry, subject, data)


_lease_value = msgspec.json.Decoder(LeaseValue).decode


def lease_run_id(subject: str) -> str | None:
    """The Run ID a lease key's subject names (``$KV.<P>_LEASES.<run>``), or None."""
    try:
        return _last_token(subject)
    except (ValueError, UnicodeDecodeError):
        return None


def lease_value_on(subject: str, data: bytes) -> LeaseValue:
    """The lease stored on a key's ``subject``, or :class:`ForeignMessage`: not a lease, or
    one of another Run than the key names."""
    value = _decoded(_lease_value, subject, data)
    if value.run_id != lease_run_id(subject):
        raise ForeignMessage(subject, f"a lease of run {value.run_id!r} under another key")
    return value


def outage_event_on(subject: str, data: bytes) -> OutageEventType:
    """The outage record stored on ``subject``, or :class:`ForeignMessage`."""
    return _decoded(decode_outage_event, subject, data)


def is_ours(judge: Callable[[str, bytes], object], subject: str, data: bytes) -> bool:
    """Whether ``judge`` (one of the functions above, bound to its subject kind) takes the
    message as ours."""
    try:
        judge(subject, data)
    except ForeignMessage:
        return False
    return True


class ForeignLog:
    """Counts the foreign messages one process met, once each, and warns once per subject.

    ``count`` is told of each one not met before: the stream's kind (``schedules``,
    ``runs``, ``index``, ``leases``, ``replicas``, ``outages``, ``checkpoints``) and the
    message (``<subject>#<seq> (<kind>): <why>``), for the provider's metric and
    ``replica.status``. :attr:`counts` and :attr:`last` are the same, kept here.
    """

    def __init__(self, count: Callable[[str, str], None] | None = None) -> None:
        self._count = count
        self.counts: Counter[str] = Counter()
        self.last: str | None = None
        """The last one met, with why: ``#<seq> on <subject>: <reason>``."""
        self._seen: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._warned: OrderedDict[str, None] = OrderedDict()

    def noted(self, kind: str, subject: str, seq: int, reason: str) -> None:
        """A reader skipped the message ``seq`` on ``subject`` of a stream of ``kind``."""
        key = (subject, seq)
        if key in self._seen:
            return
        _remember(self._seen, key)
        self.counts[kind] += 1
        self.last = f"#{seq} on {subject}: {reason}"
        if self._count is not None:
            self._count(kind, f"{subject}#{seq} ({kind}): {reason}")
        if subject not in self._warned:
            _remember(self._warned, subject)
            log.warning("skipped a message that is not the scheduler's own (#%d on %s: %s); "
                        "`nats-scheduler check` lists every such message", seq, subject,
                        reason)


def _remember(seen: OrderedDict, key: object) -> None:  # type: ignore[type-arg]
    seen[key] = None
    while len(seen) > SEEN_KEPT:
        seen.popitem(last=False)


def stream_kind(names: Names, stream: str) -> str:
    """The kind of one of the scheduler's streams, as metrics and reports name it."""
    return {
        names.schedules_stream: "schedules",
        names.runs_stream: "runs",
        names.index_stream: "index",
        names.leases_stream: "leases",
        names.replicas_stream: "replicas",
        names.outages_stream: "outages",
        names.checkpoints_stream: "checkpoints",
    }.get(stream, stream)

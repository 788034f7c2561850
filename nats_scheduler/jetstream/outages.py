"""The outage records: spans in which no provider replica ran, and the facts behind them.

A due time that passes while no provider process runs is skipped (no backfill), and the
account of due times (``core/dueaccount.py``) must tell that skip from a lost Run. So the
first replica to start after an outage appends one ``outage.recorded`` to the stream
``P_OUTAGES`` (subject ``P.outage``): from the last instant a process provably ran to its own
start (``runtime/outage_watch.py`` decides; this module reads and writes). A cluster never
down writes nothing here; the stream keeps records as long as the history index keeps Runs
(its ``max_age`` is the retention), and holds one message per outage.

The proof that a process ran is the newest server timestamp of anything processes store:
each stream's ``last_ts`` (kept by the server after the message itself expired or was
purged), above all the replicas bucket's, which every live replica writes each second and
whose last message is a beat or a leave. :func:`last_writes` reads them with one stream-info
request per stream; :func:`replicas_seen` reads the replicas bucket key by key.

Kept apart from the store's other adapters on purpose: the stream is optional (an
installation whose permissions predate it still runs, unrecorded, with a warning), and
nothing on the firing path reads or writes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import msgspec
import nats.js.errors
from nats.aio.msg import Msg
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.kv import KeyValue

from ..core.dueaccount import Outage
from ..core.events import OutageRecorded, encode
from ..core.liveness import Peer
from ..names import (
    HDR_SEQUENCE,
    HDR_SUBJECT,
    HDR_TIME_STAMP,
    Names,
    outage_msg_id,
    stream_info_subject,
)
from ..settings import NatsSettings
from .foreign import ForeignLog, ForeignMessage, outage_event_on
from .presence import replica_value_on
from .store import Store

log = logging.getLogger(__name__)

ENSURE_TIMEOUT = 1.0
"""Seconds a replica waits for the outage stream to be created or checked: a server whose
permissions predate it does not answer a refused request, and recording is optional."""

REPLAY_TIMEOUT = 5.0
"""Seconds the replicas bucket's replay may take (a few dozen keys at most)."""

READ_BATCH = 1000
"""Records read per batched read."""

_NEVER = "0001-01-01T00:00:00Z"


def parse_server_time(text: str) -> datetime | None:
    """An RFC 3339 server timestamp (nanoseconds) as an aware datetime; None for the zero
    time the server gives an empty stream."""
    if not text or text == _NEVER:
        return None
    head, _, frac = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(f"{head}.{(frac + '000000')[:6]}+00:00")


def stream_config(names: Names, settings: NatsSettings) -> StreamConfig:
    """The outage stream: ordered records of one subject, kept as long as the history."""
    age = settings.retention_days * 86400.0
    return StreamConfig(
        name=names.outages_stream, subjects=[names.outages_filter],
        description="AstraBox scheduler: spans in which no provider replica ran",
        retention=RetentionPolicy.LIMITS, storage=StorageType.FILE,
        num_replicas=settings.replicas, discard=DiscardPolicy.OLD, max_age=age,
        max_msgs_per_subject=-1, allow_direct=True, deny_delete=True,
        duplicate_window=min(120.0, age))


@dataclass(frozen=True)
class LastWrite:
    """The newest message a stream ever stored, by the server's clock."""

    stream: str
    at: datetime


@dataclass(frozen=True)
class Recorded:
    """One stored record with its sequence and the server's time of storing it."""

    seq: int
    stored_at: datetime
    event: OutageRecorded

    def outage(self) -> Outage:
        return Outage(self.event.start, self.event.end, self.event.evidence)


class OutageLog:
    """Read and append the outage records of one prefix (any user that may read them)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._names = store.names

    # ------------------------------------------------------------------ the stream

    async def ensure(self, *, warn: bool = True) -> bool:
        """Create the stream, or bring its age limit to the retention; False when refused
        or unanswered in time.

        Asked briefly: an installation whose permissions predate the stream still runs,
        without outage records (a warning says what to allow, unless ``warn`` is False: the
        caller asks again, for a busy process's own loop is not answered in time either)."""
        js = self._store.js
        wanted = stream_config(self._names, self._store.settings)
        try:
            async with asyncio.timeout(ENSURE_TIMEOUT):
                try:
                    info = await js.stream_info(self._names.outages_stream)
                except nats.js.errors.NotFoundError:
                    with contextlib.suppress(nats.js.errors.BadRequestError):  # a race lost
                        await js.add_stream(wanted)
                    return True
                if (info.config.max_age != wanted.max_age
                        or info.config.subjects != wanted.subjects):
                    # a stream of a release before the wildcard (its literal subject let a
                    # consumer deliver into it) is brought to it, keeping its records
                    await js.update_stream(replace(info.config, max_age=wanted.max_age,
                                                   subjects=wanted.subjects,
                                                   duplicate_window=wanted.duplicate_window))
        except Exception as exc:
            if warn:
                log.warning("outages are not recorded: the store refused the stream %s or "
                            "did not answer (%s); allow the scheduler to create and read it "
                            "(docs/configuration.md) so that due times skipped while no "
                            "replica ran are explained", self._names.outages_stream,
                            str(exc) or type(exc).__name__)
            return False
        return True

    async def created_at(self) -> datetime | None:
        """When the stream was created (outages are recorded from then on); None: never."""
        info = await self._info(self._names.outages_stream)
        return None if info is None else parse_server_time(str(info.get("created", "")))

    async def _info(self, stream: str) -> dict[str, object] | None:
        """A stream's info as the server sends it (nats-py drops ``state.last_ts``)."""
        nc = self._store.nc

        async def op() -> dict[str, object] | None:
            msg = await nc.request(stream_info_subject(stream), b"", timeout=2.0)
            answer = msgspec.json.decode(msg.data)
            if not isinstance(answer, dict) or "error" in answer:
                return None  # no such stream (or not ours to read)
            return answer

        return await self._store.retrying("could not read the outage records", op)

    # ------------------------------------------------------------------ evidence

    async def last_writes(self) -> list[LastWrite]:
        """The newest write each of the provider's streams ever stored (empty ones left out):
        the Schedules, the Runs, the history index, the leases, the replicas, the outages."""
        names = self._names
        streams = (names.schedules_stream, names.runs_stream, names.index_stream,
                   names.leases_stream, names.replicas_stream, names.outages_stream)
        infos = await asyncio.gather(*(self._info(s) for s in streams))
        found = []
        for stream, info in zip(streams, infos, strict=True):
            state = info.get("state") if info else None
            at = parse_server_time(str(state.get("last_ts", ""))) if isinstance(
                state, dict) else None
            if at is not None:
                found.append(LastWrite(stream, at))
        return found

    async def replicas_seen(self) -> dict[str, Peer]:
        """Every key of the replicas bucket as stored now (its newest put or its leave), by
        key, as the replica it names."""
        try:
            kv = await self._store.js.key_value(self._names.replicas_bucket)
        except nats.js.errors.BucketNotFoundError:
            return {}
        return {key: self._peer(key, entry) for key, entry in (await _keys(kv)).items()}

    def _peer(self, key: str, entry: KeyValue.Entry) -> Peer:
        created = entry.created
        stamp = created if isinstance(created, datetime) else datetime.fromtimestamp(0, UTC)
        left = entry.operation in ("DEL", "PURGE") or not entry.value
        started = None
        try:
            name = self._names.replica_of_key(key)
        except (ValueError, UnicodeDecodeError):
            name = key
        if not left:
            try:  # a value that is not a replica's (foreign) is no sign of a replica
                started = replica_value_on(self._names, self._names.replica_subject(name),
                                           entry.value or b"").started_at
            except (ForeignMessage, ValueError):
                left = True
        return Peer(name, stamp, left, started)

    # ------------------------------------------------------------------ records

    async def last(self) -> tuple[int, Recorded | None]:
        """The newest record from the stream leader, and the sequence to append after (0:
        none). A message that is not a record (foreign: jetstream/foreign.py) still counts
        for the sequence, and the record before it is the newest."""
        tail = await self._store.tail(self._names.outage_subject, outage_event_on)
        if tail.ours is None:
            return tail.last_seq, None
        event = outage_event_on(tail.ours.subject, tail.ours.data)
        return tail.last_seq, Recorded(tail.ours.seq, tail.ours.stored_at or event.at, event)

    async def append(self, event: OutageRecorded, expected_seq: int) -> int:
        """Append a record after the one at ``expected_seq``; :class:`~.errors.Conflict` when
        another replica recorded one first (the caller reads it and decides again)."""
        seq, _ = await self._store.append(
            self._names.outage_subject, encode(event), expected_seq=expected_seq,
            msg_id=outage_msg_id(event.start, event.end), judge=outage_event_on)
        return seq

    async def records(self, since: datetime | None = None) -> list[Recorded]:
        """The records stored from ``since`` on (all of them without), oldest first.

        An outage that reaches into a window starting at ``since`` was recorded after it
        ended, so after ``since``: reading from there finds every one that matters."""
        request: dict[str, object] = {"next_by_subj": self._names.outage_subject,
                                      "batch": READ_BATCH}
        if since is not None:
            request["start_time"] = since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        else:
            request["seq"] = 1
        found: list[Recorded] = []
        while True:
            msgs = await self._store.direct_batch(self._names.outages_stream, request)
            found.extend(r for m in msgs if (r := _recorded(m, self._store.foreign)) is not None)
            if len(msgs) < READ_BATCH:
                return found
            request = {"seq": int((msgs[-1].headers or {}).get(HDR_SEQUENCE, 0)) + 1,
                       "next_by_subj": self._names.outage_subject, "batch": READ_BATCH}


def _recorded(msg: Msg, foreign: ForeignLog) -> Recorded | None:
    headers = msg.headers or {}
    stored_at = parse_server_time(headers.get(HDR_TIME_STAMP, ""))
    seq = int(headers.get(HDR_SEQUENCE, 0))
    try:
        event = outage_event_on(headers.get(HDR_SUBJECT, msg.subject or ""), msg.data)
    except ForeignMessage as exc:  # never let a foreign message break the account
        foreign.noted("outages", exc.subject, seq, exc.reason)
        return None
    if stored_at is None:
        return None
    return Recorded(seq, stored_at, event)


async def _keys(kv: KeyValue) -> dict[str, KeyValue.Entry]:
    """The bucket's keys as a watch replays them; the replay ends at the entry delivered
    with nothing pending after it (nats-py's end marker can come before entries already
    delivered: ``jetstream/presence.py`` says why)."""
    watcher = await kv.watchall()
    found: dict[str, KeyValue.Entry] = {}
    with contextlib.suppress(TimeoutError):
        await _replay(watcher, found)
    return found


async def _replay(watcher: KeyValue.KeyWatcher, found: dict[str, KeyValue.Entry]) -> None:
    try:
        async with asyncio.timeout(REPLAY_TIMEOUT):
            async for entry in watcher:
                if entry is None:
                    if not found:
                        break  # an empty bucket: the marker is all there is
                    continue
                found[entry.key] = entry
                if not entry.delta:
                    break
    finally:
        with contextlib.suppress(Exception):
            await watcher.stop()


__all__ = ["LastWrite", "OutageLog", "Recorded", "parse_server_time",
           "stream_config"]

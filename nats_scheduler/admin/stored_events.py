"""Read every stored Schedule and Run event of a prefix, with the server's timestamps.

The invariant checker (:mod:`.invariants`) judges the whole history, not only the last
event per subject the projections keep, and judges it on the time the server stored each
event. A consumer delivering every message of the stream gives both in one pass: the
message metadata carries the stream sequence and the storing time. A message that does not
decode is kept (as ``event=None`` with the reason), because reporting it is one of the
checks.

:func:`load_history` holds it all in memory (tests, small stores). :func:`check_stored`
streams the Run events through the checker a batch at a time instead (``nats-scheduler
check``): a production store's million Runs in bounded memory, optionally only those
stored since an instant. The reads themselves are the adapter ``jetstream/event_reads.py``;
this module decodes what they return and feeds the checker.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec

from ..core.events import RunCreated, decode_event
from ..jetstream.connection import Connection
from ..jetstream.event_reads import BATCH, read_stream, stream_batches
from ..jetstream.outages import OutageLog
from ..jetstream.store_reads import Stored, index_retention
from ..names import Names
from .account_reads import AccountReader
from .foreign_scan import foreign_messages
from .invariants import AccountFacts, Checker, History, Options, Report, StoredEvent
from .paging_check import PAGING_SAMPLE, PagingSample, check_paging
from .reader import StoreReader, guarded


async def read_events(nc: Connection, stream: str, subject_filter: str, *,
                      timeout: float = 5.0) -> list[StoredEvent]:
    """Every event of ``stream`` (whose subjects are ``subject_filter``), oldest first; one
    that does not decode is kept with the reason (:func:`.event_reads.read_stream`)."""
    return [_event(m) for m in await read_stream(nc, stream, subject_filter, timeout=timeout)]


async def stream_events(nc: Connection, stream: str, subject_filter: str, *,
                        since: datetime | None = None, timeout: float = 5.0,
                        batch: int = BATCH) -> AsyncIterator[list[StoredEvent]]:
    """The events of ``stream`` in batches, oldest first (from ``since`` when given), each
    decoded (:func:`.event_reads.stream_batches`: bounded memory, never ending early)."""
    async for found in stream_batches(nc, stream, subject_filter, since=since,
                                      timeout=timeout, batch=batch):
        yield [_event(m) for m in found]


def _event(message: Stored) -> StoredEvent:
    """The event of a message read back, or None with the reason it does not decode."""
    at = message.stored_at
    assert at is not None  # a consumer's delivery says when the server stored it
    try:
        event = decode_event(message.data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return StoredEvent(message.seq, message.subject, at, None, str(exc)[:200])
    return StoredEvent(message.seq, message.subject, at, event)


async def account_facts(nc: Connection, prefix: str = "SCHED", *,
                        timeout: float = 5.0) -> AccountFacts:
    """The outages the store recorded (and the one going on now, when no replica's key is
    in the replicas bucket), when it began to record them, and the retention in force."""
    store = StoreReader(nc, prefix, timeout=timeout).store()

    async def read() -> AccountFacts:
        outages = await AccountReader(store, timeout=timeout).outages(_EPOCH, running=False)
        since = await OutageLog(store).created_at()
        retention = await index_retention(nc, store.names, timeout=timeout)
        return AccountFacts(outages=outages, accounted_since=since,
                            retention_days=retention.days if retention else None,
                            retention_runs=retention.runs if retention else None)

    return await guarded("outage records", read)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


async def load_history(nc: Connection, prefix: str = "SCHED", *, timeout: float = 5.0) -> History:
    """Every Schedule and Run event of ``prefix`` and the stored leases.

    Engine and connection failures become the admin's clean UNAVAILABLE error.
    """
    names = Names(prefix)
    read_at = datetime.now(UTC)
    runs = await guarded("run events", lambda: read_events(
        nc, names.runs_stream, names.runs_filter, timeout=timeout))
    schedules = await guarded("schedule events", lambda: read_events(
        nc, names.schedules_stream, names.schedules_filter, timeout=timeout))
    leases = await StoreReader(nc, prefix, timeout=timeout).leases()
    account = await account_facts(nc, prefix, timeout=timeout)
    foreign = await guarded("the index, buckets and records", lambda: foreign_messages(
        nc, names, timeout=timeout))
    return History(prefix=prefix, runs=runs, schedules=schedules, leases=leases,
                   read_at=read_at, account=account, foreign=foreign)


@dataclass(frozen=True)
class CheckRun:
    """One streamed check: the report and how fast the store was read and judged."""

    report: Report
    seconds: float
    skipped: int
    """Events of Runs created before ``since``, not judged."""
    paged: tuple[str, ...] = ()
    """The deployments whose history was walked page by page (:mod:`.paging_check`)."""
    paging_seconds: float = 0.0
    """What walking them took."""

    @property
    def rate(self) -> float:
        """Events read and judged per second."""
        return self.report.events / self.seconds if self.seconds > 0 else 0.0


async def check_stored(nc: Connection, prefix: str, options: Options, *,
                       since: datetime | None = None, timeout: float = 5.0,
                       progress: Callable[[int, float], None] | None = None,
                       paging_sample: int = PAGING_SAMPLE) -> CheckRun:
    """Check the store of ``prefix``, streaming its Run events (bounded memory).

    The Schedules (one to a few events each) and the leases are read whole first; the Run
    events are fed to :class:`~.invariants.Checker` a batch at a time. With ``since``, only
    the Run events stored from then on (Runs created before it are skipped, and no due time
    before it is expected). ``progress(events, seconds)`` after each batch. Then the
    histories of ``paging_sample`` deployments, sampled from the Runs streamed, are walked
    page by page (:mod:`.paging_check`).
    """
    names = Names(prefix)
    began = time.monotonic()
    read_at = datetime.now(UTC)
    schedules = await guarded("schedule events", lambda: read_events(
        nc, names.schedules_stream, names.schedules_filter, timeout=timeout))
    leases = await StoreReader(nc, prefix, timeout=timeout).leases()
    account = await account_facts(nc, prefix, timeout=timeout)
    checker = Checker(prefix, schedules, leases, options, partial=since is not None,
                      since=since, account=account)
    sample = PagingSample(paging_sample)

    async def feed() -> None:
        async for found in stream_events(nc, names.runs_stream, names.runs_filter,
                                         since=since, timeout=timeout):
            for stored in found:
                checker.feed(stored)
                if isinstance(stored.event, RunCreated):
                    sample.note(stored.event.run.deployment_id)
            if progress is not None:
                progress(checker.events, time.monotonic() - began)

    await guarded("run events", feed)
    report = checker.finish(read_at).adding(await guarded(
        "the index, buckets and records", lambda: foreign_messages(nc, names, timeout=timeout)))
    walked = time.monotonic()
    paging = await check_paging(StoreReader(nc, prefix, timeout=timeout), sample.deployments)
    if paging:
        report = dataclasses.replace(
            report, violations=tuple(sorted((*report.violations, *paging))))
    return CheckRun(report, time.monotonic() - began, checker.skipped,
                    tuple(sample.deployments), time.monotonic() - walked)

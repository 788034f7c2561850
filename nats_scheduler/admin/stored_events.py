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
stored since an instant.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from ..core.events import RunCreated, decode_event
from ..jetstream.outages import OutageLog
from ..names import Names
from .account_reads import AccountReader
from .invariants import AccountFacts, Checker, History, Options, Report, StoredEvent
from .paging_check import PAGING_SAMPLE, PagingSample, check_paging
from .reader import StoreReader, guarded, index_retention


async def read_stream(nc: Client, stream: str, subject_filter: str, *,
                      timeout: float = 5.0, attempts: int = 5) -> list[StoredEvent]:
    """Every message of ``stream`` (whose subjects are ``subject_filter``), oldest first.

    Reads up to the stream's last sequence as of the call. A consumer that stops delivering
    before it (a cluster still settling after a fault) is recreated from the next sequence,
    up to ``attempts`` times; then the read fails rather than return a truncated history.
    """
    js = nc.jetstream(timeout=timeout)
    try:
        info = await js.stream_info(stream)
    except nats.js.errors.NotFoundError:
        return []
    if not info.state.messages:
        return []
    last, found = info.state.last_seq, []
    for _ in range(attempts):
        start = found[-1].seq + 1 if found else info.state.first_seq
        found += await _read_from(js, stream, subject_filter, start, last, timeout)
        if not found or found[-1].seq >= last:
            return found
    raise nats.errors.TimeoutError


async def _read_from(js: JetStreamContext, stream: str, subject_filter: str, start: int,
                     last: int, timeout: float) -> list[StoredEvent]:
    """Messages from sequence ``start`` up to ``last``, until delivery stops."""
    config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                            opt_start_seq=start)
    sub = await js.subscribe(subject_filter, stream=stream, ordered_consumer=True,
                             config=config)
    found: list[StoredEvent] = []
    try:
        while not found or found[-1].seq < last:
            msg = await sub.next_msg(timeout)
            meta = msg.metadata
            found.append(_stored(meta.sequence.stream, msg.subject, meta.timestamp, msg.data))
            if meta.num_pending == 0:
                break
    except nats.errors.TimeoutError:
        pass  # the caller starts again from the next sequence
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return found


def _stored(seq: int, subject: str, stored_at: datetime, data: bytes) -> StoredEvent:
    try:
        event = decode_event(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return StoredEvent(seq, subject, stored_at, None, str(exc)[:200])
    return StoredEvent(seq, subject, stored_at, event)


async def account_facts(nc: Client, prefix: str = "SCHED", *,
                        timeout: float = 5.0) -> AccountFacts:
    """The outages the store recorded (and the one going on now, when no replica's key is
    in the replicas bucket), when it began to record them, and the retention in force."""
    store = StoreReader(nc, prefix, timeout=timeout).store()

    async def read() -> AccountFacts:
        outages = await AccountReader(store, timeout=timeout).outages(_EPOCH, running=False)
        since = await OutageLog(store).created_at()
        retention = await index_retention(nc.jetstream(timeout=timeout), store.names)
        return AccountFacts(outages=outages, accounted_since=since,
                            retention_days=retention.days if retention else None,
                            retention_runs=retention.runs if retention else None)

    return await guarded("outage records", read)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


async def load_history(nc: Client, prefix: str = "SCHED", *, timeout: float = 5.0) -> History:
    """Every Schedule and Run event of ``prefix`` and the stored leases.

    Engine and connection failures become the admin's clean UNAVAILABLE error.
    """
    names = Names(prefix)
    read_at = datetime.now(UTC)
    runs = await guarded("run events", lambda: read_stream(
        nc, names.runs_stream, names.runs_filter, timeout=timeout))
    schedules = await guarded("schedule events", lambda: read_stream(
        nc, names.schedules_stream, names.schedules_filter, timeout=timeout))
    leases = await StoreReader(nc, prefix, timeout=timeout).leases()
    account = await account_facts(nc, prefix, timeout=timeout)
    return History(prefix=prefix, runs=runs, schedules=schedules, leases=leases,
                   read_at=read_at, account=account)


BATCH = 2000
"""Messages fetched per request by :func:`stream_events`: the memory held at once."""


async def stream_events(nc: Client, stream: str, subject_filter: str, *,
                        since: datetime | None = None, timeout: float = 5.0,
                        attempts: int = 5, batch: int = BATCH
                        ) -> AsyncIterator[list[StoredEvent]]:
    """The messages of ``stream`` in batches, oldest first (from ``since`` when given).

    A pull consumer without acknowledgements (the server keeps no state per message). It
    ends at the last message stored when it was created; one that stops answering (a
    cluster settling after a fault) is recreated from the next sequence, up to ``attempts``
    times in a row, and then the read fails rather than end early.
    """
    js = nc.jetstream(timeout=timeout)
    try:
        await js.stream_info(stream)
    except nats.js.errors.NotFoundError:
        return
    next_seq: int | None = None
    failures = 0
    while True:
        sub = await js.pull_subscribe(subject_filter, stream=stream,
                                      config=_pull_config(next_seq, since))
        name: str | None = None
        try:
            info = await sub.consumer_info()
            name = info.name
            if not info.num_pending:
                return
            while True:
                try:
                    msgs = await sub.fetch(batch, timeout=timeout)
                except nats.errors.TimeoutError:
                    break  # recreated from the next sequence below
                found, done = [], False
                for msg in msgs:
                    meta = msg.metadata
                    found.append(_stored(meta.sequence.stream, msg.subject, meta.timestamp,
                                         msg.data))
                    done = meta.num_pending == 0
                if found:
                    failures = 0
                    next_seq = found[-1].seq + 1
                    yield found
                if done:
                    return
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
            if name is not None:  # else it goes by itself after its inactive threshold
                with contextlib.suppress(Exception):
                    await js.delete_consumer(stream, name)
        failures += 1
        if failures >= attempts:
            raise nats.errors.TimeoutError


def _pull_config(next_seq: int | None, since: datetime | None) -> ConsumerConfig:
    common: dict[str, object] = {"ack_policy": AckPolicy.NONE, "inactive_threshold": 30.0,
                                 "mem_storage": True}
    if next_seq is not None:
        return ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                              opt_start_seq=next_seq, **common)  # type: ignore[arg-type]
    if since is not None:
        return ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME,
                              opt_start_time=since, **common)  # type: ignore[arg-type]
    return ConsumerConfig(deliver_policy=DeliverPolicy.ALL, **common)  # type: ignore[arg-type]


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


async def check_stored(nc: Client, prefix: str, options: Options, *,
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
    schedules = await guarded("schedule events", lambda: read_stream(
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
    report = checker.finish(read_at)
    walked = time.monotonic()
    paging = await check_paging(StoreReader(nc, prefix, timeout=timeout), sample.deployments)
    if paging:
        report = dataclasses.replace(
            report, violations=tuple(sorted((*report.violations, *paging))))
    return CheckRun(report, time.monotonic() - began, checker.skipped,
                    tuple(sample.deployments), time.monotonic() - walked)

"""``nats-scheduler doctor``: what this store can promise, checked one line at a time.

The provider's guarantees rest on the server (docs/configuration.md): a version with the
conditional-publish fixes (2.12.3+), JetStream, the streams and bucket set up as the
provider needs them, the history retention they enforce, replicas on a cluster,
``sync_interval: always``, least-privilege users, hosts' clocks near the store's, and live
replicas that serve the admin service (a replica the server refuses it fires, but answers
no action: its key in the replicas bucket says why).
:func:`run_doctor` checks each and says what to do.

The doctor talks to operators of NATS, so unlike the provider's errors (docs/contract.md,
"Errors") its messages use NATS words: they must name the setting to change.

Every check is split into a small pure *decision* (the ``*_check`` functions of
``admin/doctor_checks.py``, tested with plain dicts, importable from here too), the probes
of the server that gather its inputs (``jetstream/probes.py``: facts, or why there are
none) and the wording here of what the probes found (:func:`run_doctor`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import msgspec

from ..clock import SystemClock
from ..core.herd import busiest_minute
from ..jetstream.event_reads import stream_batches
from ..jetstream.probes import (
    AccountUsage,
    NoAnswer,
    ServerProbe,
    StreamFacts,
    Unanswered,
    fetch_varz,
)
from ..jetstream.store_reads import Retention
from ..names import JS_API_INFO, Names
from ..seam import SchedulerError
from ..settings import NatsSettings
from .doctor_checks import (
    ADMIN_SERVICE_CHECK,
    CLOCK_CHECK,
    Check,
    DoctorReport,
    Status,
    Varz,
    admin_service_check,
    clock_check,
    durability_check,
    foreign_check,
    herd_check,
    parse_varz,
    permissions_check,
    replication_check,
    retention_check,
    version_check,
)
from .foreign_scan import foreign_in, judges
from .reader import REPLICA_STATUS_ENDPOINT, StoreReader

__all__ = [
    "ADMIN_SERVICE_CHECK",
    "CLOCK_CHECK",
    "Check",
    "DoctorReport",
    "Status",
    "Varz",
    "admin_service_check",
    "clock_check",
    "durability_check",
    "herd_check",
    "parse_varz",
    "permissions_check",
    "replication_check",
    "retention_check",
    "run_doctor",
    "version_check",
]

_TIMEOUT = 2.0


# =========================================================================== the findings, in words


def _jetstream_check(found: AccountUsage | NoAnswer) -> Check:
    if isinstance(found, NoAnswer):
        if found.why == Unanswered.OFF:
            return Check("jetstream", Status.FAIL, "JetStream is off on this server; enable "
                         "it (`jetstream { ... }` in the server config)")
        if found.why == Unanswered.UNUSABLE:
            return Check("jetstream", Status.FAIL,
                         f"JetStream is not usable for this account: {found.detail}")
        if found.why == Unanswered.REFUSED:
            return Check("jetstream", Status.WARN, "unknown: this user may not read the "
                         f"account's JetStream information ({JS_API_INFO})")
        return Check("jetstream", Status.FAIL, "JetStream did not answer")
    limit = ("none" if found.max_storage < 0 else f"{found.max_storage / 2**30:g} GiB")
    return Check("jetstream", Status.OK,
                 f"enabled; account uses {found.streams} stream(s), "
                 f"{found.storage / 2**20:.1f} MiB on disk (limit {limit})")


def _stream_check(name: str, found: StreamFacts | NoAnswer, prefix: str) -> Check:
    """What one stream (or bucket) as the server has it means for the provider."""
    what = f"stream {name}"
    if isinstance(found, NoAnswer):
        if found.why == Unanswered.MISSING:
            return Check(what, Status.WARN, "missing: the provider creates it on its first "
                         "start (if this is not a new installation, check "
                         "ASTRABOX_NATS_PREFIX)")
        if found.why == Unanswered.UNUSABLE:  # JetStream off or unusable: said above
            return Check(what, Status.FAIL,
                         f"cannot be read: {found.detail or 'JetStream is off'}")
        return Check(what, Status.WARN, "this user may not read it"
                     if found.why == Unanswered.REFUSED else "no answer")
    if found.problems:
        return Check(what, Status.FAIL, "; ".join(found.problems))
    shown = (f"R{found.replicas}, {found.messages} message(s), "
             f"{found.bytes / 2**20:.1f} MiB")
    if not found.atomic and name != Names(prefix).replicas_stream:
        return Check(what, Status.WARN,
                     f"{shown}; set up by an older release without atomic batches "
                     "(allow_atomic): written one message at a time, slower; an "
                     "administrator can turn it on")
    return Check(what, Status.OK, shown)


async def _stream_checks(
    probe: ServerProbe, settings: NatsSettings
) -> tuple[list[Check], dict[str, int], str | None]:
    """One check per stream (and the lease and replicas buckets); also the replicas and
    cluster found."""
    checks: list[Check] = []
    replicas: dict[str, int] = {}
    cluster: str | None = None
    for name, found in await probe.streams(settings):
        if isinstance(found, StreamFacts):
            replicas[name] = found.replicas
            cluster = cluster or found.cluster
        checks.append(_stream_check(name, found, settings.prefix))
    return checks, replicas, cluster


def _retention(found: Retention | NoAnswer | None, settings: NatsSettings) -> Check:
    stream = Names(settings.prefix).index_stream
    if isinstance(found, NoAnswer):
        if found.why == Unanswered.UNUSABLE:  # JetStream off or unusable: said above
            return Check("history retention", Status.WARN,
                         f"unknown: stream {stream} cannot be read "
                         f"({found.detail or 'JetStream is off'})")
        refused = found.why == Unanswered.REFUSED
        return Check("history retention", Status.WARN,
                     f"unknown: {'this user may not read' if refused else 'no answer for'} "
                     f"stream {stream}")
    return retention_check(stream, found, settings)


def _fetch_varz(url: str) -> Varz:
    data = fetch_varz(url, _TIMEOUT)
    if isinstance(data, str):
        return Varz(url, None, error=data)
    return parse_varz(url, data)


async def _durability(monitor_url: str | None, declared: bool) -> Check:
    urls = [u.strip() for u in (monitor_url or "").split(",") if u.strip()]
    nodes = await asyncio.gather(*(asyncio.to_thread(_fetch_varz, u) for u in urls))
    return durability_check(list(nodes), declared)


class _Metrics(msgspec.Struct):
    foreign: list[str] = []


class _Replica(msgspec.Struct):
    identity: str
    server_offset: float | None = None
    metrics: _Metrics | None = None


@dataclass(frozen=True)
class _Offsets:
    """What the replicas that answered said of their host clocks against the store's, and
    of the foreign messages their readers skipped."""

    measured: dict[str, float]
    unmeasured: list[str]
    foreign: dict[str, list[str]]


async def _replica_clocks(probe: ServerProbe, names: Names) -> _Offsets | str:
    """Every live replica's own measure of its host clock against the store's, or why they
    could not be asked.

    A scatter-gather on ``<P>.admin.replica.status``, which every provider process answers
    with its ``server_offset`` (admin/service.py): the replica measured it from its own
    writes' server timestamps, so the doctor's clock and the request's latency play no part.
    """
    answers = await probe.ask_all(names.admin_subject(REPLICA_STATUS_ENDPOINT))
    if isinstance(answers, NoAnswer):
        if answers.why == Unanswered.REFUSED:
            return "this user may not ask the replicas (admin replica.status)"
        return "no scheduler process answered (the admin service check says which are alive)"
    found = _Offsets(measured={}, unmeasured=[], foreign={})
    for data in answers:
        try:
            replica = msgspec.json.decode(data, type=_Replica)
        except (msgspec.ValidationError, msgspec.DecodeError):
            continue
        found.foreign[replica.identity] = replica.metrics.foreign if replica.metrics else []
        if replica.server_offset is None:
            found.unmeasured.append(replica.identity)
        else:
            found.measured[replica.identity] = replica.server_offset
    return found if found.measured or found.unmeasured else "no scheduler process answered"


async def _clock(probe: ServerProbe, names: Names
                 ) -> tuple[Check, int | None, dict[str, list[str]] | None]:
    """The clock check, how many replicas answered (None: unknown), and the foreign
    messages each said its readers skipped (None: none answered)."""
    found = await _replica_clocks(probe, names)
    if isinstance(found, str):
        return clock_check(None, reason=found), None, None
    return (clock_check(found.measured, found.unmeasured),
            len(found.measured) + len(found.unmeasured), found.foreign)


async def _foreign(probe: ServerProbe, names: Names,
                   seen: dict[str, list[str]] | None) -> Check:
    """The foreign messages the replicas met, and those of the buckets and outage records
    (small: read whole here; the events and the index are ``nats-scheduler check``'s)."""
    found: list[str] = []
    try:
        for stream, subjects, judge in judges(names):
            if stream in (names.index_stream, names.checkpoints_stream):
                continue
            async for batch in stream_batches(probe.nc, stream, subjects, timeout=_TIMEOUT):
                found += [f"{v.subject} ({stream})" for stored in batch
                          if (v := foreign_in(stream, stored, judge)) is not None]
    except Exception:  # not readable by this user: what the replicas said stands
        return foreign_check(seen, None)
    return foreign_check(seen, found)


async def _admin_service(probe: ServerProbe, names: Names) -> Check:
    """Whether the live replicas serve the admin service, as their keys say."""
    live = await StoreReader(probe.nc, names.prefix, timeout=_TIMEOUT).live_replicas()
    if live is None:
        return admin_service_check(None, f"the replicas bucket ({names.replicas_stream}) "
                                   "could not be read: this user may not read it, or no answer")
    return admin_service_check({r.identity: r.admin_service for r in live})


async def _herd(probe: ServerProbe, settings: NatsSettings, replicas: int | None) -> Check:
    try:
        table = await StoreReader(probe.nc, settings.prefix, timeout=_TIMEOUT).schedule_table()
    except Exception as exc:  # unreadable: said by the stream and permission checks
        return Check("busiest minute", Status.WARN, f"unknown: the Schedules could not be "
                     f"read ({exc})")
    return herd_check(busiest_minute(table.all(), SystemClock().now()), replicas)


async def run_doctor(settings: NatsSettings, *, monitor_url: str | None = None) -> DoctorReport:
    """Connect with ``settings`` and check everything the provider relies on.

    ``monitor_url``: the server's monitoring base URL(s), comma-separated for a cluster
    (e.g. ``http://127.0.0.1:8222``); without it the durability check says "unknown".
    """
    try:
        probe = await ServerProbe.open(settings, _TIMEOUT)
    except SchedulerError as exc:
        return DoctorReport([Check("connection", Status.FAIL, str(exc)),
                             await _durability(monitor_url, settings.server_sync_always)])
    try:
        version = probe.version
        names = Names(settings.prefix)
        checks = [Check("connection", Status.OK, f"nats-server {version or '?'} at "
                        f"{probe.where}"),
                  version_check(version),
                  _jetstream_check(await probe.jetstream())]
        stream_checks, replicas, cluster = await _stream_checks(probe, settings)
        checks += stream_checks
        checks.append(_retention(await probe.retention(names), settings))
        checks.append(replication_check(cluster, probe.nodes, replicas, settings.replicas))
        checks.append(await _durability(monitor_url, settings.server_sync_always))
        checks.append(permissions_check(await probe.capabilities(names)))
        clock, live, foreign = await _clock(probe, names)
        checks.append(clock)
        checks.append(await _foreign(probe, names, foreign))
        checks.append(await _admin_service(probe, names))
        checks.append(await _herd(probe, settings, live))
        return DoctorReport(checks)
    finally:
        await probe.close()

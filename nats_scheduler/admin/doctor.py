"""``nats-scheduler doctor``: what this store can promise, checked one line at a time.

The provider's guarantees rest on the server (docs/configuration.md): a version with the
conditional-publish fixes (2.12.3+), JetStream, the streams and bucket set up as the
provider needs them, the history retention they enforce, replicas on a cluster,
``sync_interval: always``, least-privilege users and hosts' clocks near the store's.
:func:`run_doctor` checks each and says what to do.

The doctor talks to operators of NATS, so unlike the provider's errors (docs/contract.md,
"Errors") its messages use NATS words: they must name the setting to change.

Every check is split into a small pure *decision* (``*_check`` functions, tested with
plain dicts) and the I/O that gathers its inputs (:func:`run_doctor`).
"""

from __future__ import annotations

import asyncio
import json
import math
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

import msgspec
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import StreamConfig

from ..clock import SystemClock
from ..core.herd import HERD_LATENESS_SECONDS, busiest_minute, herd_capacity, replicas_needed
from ..jetstream.connection import (
    MIN_SERVER_VERSION,
    connect,
    jetstream_off,
    parse_version,
    server_version,
)
from ..jetstream.setup import incompatibilities
from ..jetstream.store import Store
from ..names import HDR_STATUS, JS_API_INFO, Names, is_kv_stream, stream_info_subject
from ..seam import SchedulerError
from ..settings import NatsSettings
from .permissions import ViolationLog, capabilities
from .reader import REPLICA_STATUS_ENDPOINT, Retention, StoreReader, index_retention
from .skew import OFFSET_FAIL_SECONDS, OFFSET_WARN_SECONDS, offset_level

__all__ = [
    "Check",
    "DoctorReport",
    "Status",
    "clock_check",
    "durability_check",
    "permissions_check",
    "replication_check",
    "retention_check",
    "run_doctor",
    "version_check",
]

_TIMEOUT = 2.0
_MIN = ".".join(map(str, MIN_SERVER_VERSION))


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report."""

    name: str
    status: Status
    detail: str


@dataclass(frozen=True)
class DoctorReport:
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.status != Status.FAIL for c in self.checks)

    def get(self, name: str) -> Check:
        """The check called ``name`` (KeyError if the doctor did not run it)."""
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(name)

    def lines(self) -> list[str]:
        """The report as text, one line per check: ``[ok]   name: detail``."""
        return [f"[{c.status.value}]{' ' * (5 - len(c.status.value))}{c.name}: {c.detail}"
                for c in self.checks]


# =========================================================================== decisions


def version_check(text: str) -> Check:
    """FAIL below 2.12.3: ``start()`` refuses such a server (Store.check_server)."""
    if parse_version(text) < MIN_SERVER_VERSION:
        return Check("server version", Status.FAIL,
                     f"{text or 'unknown'}: the provider needs {_MIN} or newer (conditional "
                     f"publishes had clustered-correctness fixes up to {_MIN}); upgrade")
    return Check("server version", Status.OK, f"{text} (needs {_MIN}+)")


def replication_check(
    cluster: str | None, nodes: int, replicas: Mapping[str, int], wanted: int
) -> Check:
    """WARN when streams are R1 on a cluster (or R>1 is asked of a single server).

    ``cluster`` is the cluster's name as a stream reported it (None before the first start
    or on a single server); ``nodes`` the servers the connection knows, configured and
    advertised by the server: more than one means a cluster even before any stream exists.
    """
    if not cluster and nodes < 2:
        if wanted > 1:
            return Check("replication", Status.WARN,
                         f"ASTRABOX_NATS_REPLICAS={wanted} but the server is not clustered: "
                         "creating the streams will fail; use 1 or connect to a cluster")
        return Check("replication", Status.OK,
                     "single server, streams R1 (no copy survives losing this server's disk)")
    where = (f"cluster {cluster}" if cluster else "a cluster") + (
        f" ({nodes} nodes)" if nodes > 1 else "")
    # Existing streams decide; only before the first start does the setting matter.
    single = sorted(name for name, n in replicas.items() if n < 2)
    if single or (not replicas and wanted < 2):
        named = ", ".join(single) if single else "the streams the provider will create"
        return Check("replication", Status.WARN,
                     f"{named} R1 on {where}: losing one node loses acknowledged Runs; set "
                     "ASTRABOX_NATS_REPLICAS=3 (existing streams: "
                     "`nats stream edit <name> --replicas 3`)")
    return Check("replication", Status.OK, f"streams R{min(replicas.values() or [wanted])} "
                                           f"on {where}")


@dataclass(frozen=True)
class Varz:
    """What one node's monitoring endpoint said about write durability."""

    url: str
    sync_always: bool | None
    """True/False from /varz; None when the endpoint could not be read or said nothing."""
    sync_interval_ns: int | None = None
    error: str | None = None


def parse_varz(url: str, varz: Mapping[str, object]) -> Varz:
    """Read ``jetstream.config`` of a /varz answer.

    nats-server 2.15 reports ``sync_interval: always`` as ``"sync_always": true`` while
    ``sync_interval`` keeps showing the 2-minute default (in nanoseconds); without it,
    ``sync_always`` is absent and ``sync_interval`` is the configured interval.
    """
    jetstream = varz.get("jetstream")
    config = jetstream.get("config") if isinstance(jetstream, Mapping) else None
    if not isinstance(config, Mapping):
        return Varz(url, None, error="JetStream configuration not reported")
    interval = config.get("sync_interval")
    interval_ns = interval if isinstance(interval, int) else None
    return Varz(url, bool(config.get("sync_always", False)), interval_ns)


def _duration(ns: int | None) -> str:
    if ns is None:
        return "the default (2m)"
    seconds = ns / 1e9
    return f"{seconds / 60:g}m" if seconds >= 60 and seconds % 60 == 0 else f"{seconds:g}s"


def durability_check(nodes: Sequence[Varz]) -> Check:
    """WARN unless every node's monitoring endpoint shows ``sync_interval: always``."""
    if not nodes:
        return Check("durability", Status.WARN,
                     "unknown: no monitoring URL given (doctor --monitor-url "
                     "http://HOST:8222[,...]) to check sync_interval")
    lax = [n for n in nodes if n.sync_always is False]
    unknown = [n for n in nodes if n.sync_always is None]
    if lax:
        shown = ", ".join(f"{n.url} ({_duration(n.sync_interval_ns)})" for n in lax)
        return Check("durability", Status.WARN,
                     f"sync_interval is not 'always' on {shown}: the server acknowledges "
                     "writes before they reach disk, and a crash or power loss can lose an "
                     "acknowledged Run; set `jetstream { sync_interval: always }`")
    if unknown:
        shown = ", ".join(f"{n.url} ({n.error})" for n in unknown)
        return Check("durability", Status.WARN, f"unknown on {shown}")
    return Check("durability", Status.OK,
                 f"sync_interval always (fsync before ack) on {len(nodes)} node(s)")


_WRITES = ("append Schedule events", "append Run events", "change leases", "announce replicas",
           "create streams")
_DESTROY = ("delete streams", "purge streams", "delete events")


def permissions_check(abilities: Mapping[str, bool]) -> Check:
    """Say what the user can do and which role of nats-server.conf that looks like."""
    can = [a for a, ok in abilities.items() if ok]
    cannot = [a for a, ok in abilities.items() if not ok]
    detail = f"can: {', '.join(can) or 'nothing probed'}; cannot: {', '.join(cannot) or '-'}"
    if not abilities.get("read events", False):
        return Check("permissions", Status.FAIL, f"cannot read the Run events. {detail}")
    destroys = [a for a in _DESTROY if abilities.get(a)]
    if destroys:
        return Check("permissions", Status.WARN,
                     f"this user can {', '.join(destroys)}: more than any scheduler role "
                     f"needs (see the users in nats-server.conf). {detail}")
    if all(abilities.get(a) for a in _WRITES):
        role = "scheduler (provider processes)"
    elif any(abilities.get(a) for a in _WRITES):
        role = "partial writer: the provider needs every write permission of 'scheduler'"
        return Check("permissions", Status.WARN, f"{role}. {detail}")
    elif abilities.get("request actions (hold, release, Run now, Replay)"):
        role = "operator"
    else:
        role = "auditor (read-only)"
    return Check("permissions", Status.OK, f"looks like {role}. {detail}")


CLOCK_CHECK = "clock vs store"


def clock_check(offsets: Mapping[str, float] | None, unmeasured: Sequence[str] = (),
                reason: str | None = None) -> Check:
    """Each replica's host clock against the store's, as the replica measured it
    (``admin/skew.py``: the bounds and why they matter although firing corrects it)."""
    if offsets is None:
        return Check(CLOCK_CHECK, Status.WARN, f"unknown: {reason or 'no replica answered'}")
    missing = ""
    if unmeasured:
        named = ", ".join(sorted(unmeasured)[:5]) + (", ..." if len(unmeasured) > 5 else "")
        missing = (f"; {len(unmeasured)} replica(s) report no estimate ({named}): not "
                   "joined yet, or a version from before it was reported")
    if not offsets:
        return Check(CLOCK_CHECK, Status.WARN, f"unknown{missing}")
    worst_id, worst = max(offsets.items(), key=lambda item: abs(item[1]))
    shown = (f"largest {worst:+.3f} s ({worst_id}) across {len(offsets)} replica(s)"
             f"{missing}")
    level = offset_level(worst)
    if level == "fail":
        return Check(CLOCK_CHECK, Status.FAIL,
                     f"{shown}: {OFFSET_FAIL_SECONDS:g} s or more off the store's clock. "
                     "Replicas fire by the store's clock, but one that loses its estimate "
                     "(a store outage, a restart) reads its host clock, early or late by "
                     "this much; fix NTP on that host")
    if level == "warn" or unmeasured:
        return Check(CLOCK_CHECK, Status.WARN,
                     f"{shown}: keep hosts within {OFFSET_WARN_SECONDS:g} s of the store; "
                     "check NTP" if level == "warn" else shown)
    return Check(CLOCK_CHECK, Status.OK, shown)


def _limits(days: float | None, runs: int | None) -> str:
    age = "no age limit" if days is None else f"{days:g} days"
    count = "no count limit" if runs is None else f"newest {runs} Runs per deployment"
    return f"{age}, {count}"


def retention_check(stream: str, found: Retention | None, settings: NatsSettings) -> Check:
    """Report the history retention the server enforces: the index stream's limits.

    ``found`` is None when the index stream is missing: no provider of this version has
    started with this prefix yet, so nothing bounds the history until one does (it creates
    the index with the retention settings). A stream without a limit keeps the history
    growing; limits other than this environment's settings are the ones in force, and a
    provider started with these settings would change them (``start()`` updates the index).
    """
    wanted = _limits(settings.retention_days, settings.retention_runs)
    if found is None:
        return Check("history retention", Status.WARN,
                     f"stream {stream} missing: no provider of this version has started with "
                     f"this prefix yet; the first one creates it with {wanted} "
                     "(ASTRABOX_NATS_RETENTION_DAYS, ASTRABOX_NATS_RETENTION_RUNS)")
    age = "0 (none)" if found.days is None else f"{found.days:g}d"
    shown = (f"{_limits(found.days, found.runs)} (stream {stream}: max_age {age}, "
             f"max_msgs_per_subject {found.runs if found.runs is not None else -1})")
    if found.days is None or found.runs is None:
        return Check("history retention", Status.WARN,
                     f"{shown}: the history grows without bound; a provider's start sets the "
                     "limits again from ASTRABOX_NATS_RETENTION_DAYS and _RUNS")
    if found.runs != settings.retention_runs or not math.isclose(
            found.days, settings.retention_days, rel_tol=1e-9):
        shown += (f"; these settings say {wanted}: a provider started with them changes "
                  "the retention")
    return Check("history retention", Status.OK, shown)


# =========================================================================== gathering


async def _connect(settings: NatsSettings) -> tuple[Client, ViolationLog]:
    """The provider's own connect (its clean errors), with permission refusals recorded."""
    log = ViolationLog()
    nc = await connect(settings, "nats-scheduler doctor", error_cb=log.on_error)
    return nc, log


async def _jetstream_check(nc: Client, log: ViolationLog) -> Check:
    mark = log.mark()
    try:
        account = await nc.jetstream(timeout=_TIMEOUT).account_info()
    except nats.js.errors.APIError as exc:
        if jetstream_off(exc) and exc.err_code is None:  # nobody answers the JetStream API
            return Check("jetstream", Status.FAIL, "JetStream is off on this server; enable "
                         "it (`jetstream { ... }` in the server config)")
        return Check("jetstream", Status.FAIL,
                     f"JetStream is not usable for this account: {exc.description}")
    except (TimeoutError, nats.errors.TimeoutError):
        if log.refused_since(mark, "publish", JS_API_INFO):
            return Check("jetstream", Status.WARN, "unknown: this user may not read the "
                         f"account's JetStream information ({JS_API_INFO})")
        return Check("jetstream", Status.FAIL, "JetStream did not answer")
    limits = account.limits
    return Check("jetstream", Status.OK,
                 f"enabled; account uses {account.streams} stream(s), "
                 f"{account.storage / 2**20:.1f} MiB on disk (limit "
                 f"{'none' if limits.max_storage < 0 else f'{limits.max_storage / 2**30:g} GiB'})")


def _wanted_configs(nc: Client, settings: NatsSettings) -> list[StreamConfig]:
    names = Names(settings.prefix)
    configs = Store(nc, settings).stream_configs()
    configs.append(StreamConfig(name=names.leases_stream, subjects=[names.leases_filter]))
    configs.append(StreamConfig(name=names.replicas_stream, subjects=[names.replicas_filter]))
    return configs


async def _stream_checks(
    nc: Client, settings: NatsSettings, log: ViolationLog
) -> tuple[list[Check], dict[str, int], str | None]:
    """One check per stream (and the lease and replicas buckets); also the replicas and
    cluster found."""
    js = nc.jetstream(timeout=_TIMEOUT)
    checks: list[Check] = []
    replicas: dict[str, int] = {}
    cluster: str | None = None
    for wanted in _wanted_configs(nc, settings):
        name = str(wanted.name)
        mark = log.mark()
        try:
            info = await js.stream_info(name)
        except nats.js.errors.NotFoundError:
            checks.append(Check(f"stream {name}", Status.WARN,
                                "missing: the provider creates it on its first start (if this "
                                "is not a new installation, check ASTRABOX_NATS_PREFIX)"))
            continue
        except (TimeoutError, nats.errors.TimeoutError):
            refused = log.refused_since(mark, "publish", stream_info_subject(name))
            checks.append(Check(f"stream {name}", Status.WARN,
                                "this user may not read it" if refused else "no answer"))
            continue
        except nats.js.errors.APIError as exc:  # JetStream off or unusable: said above
            checks.append(Check(f"stream {name}", Status.FAIL,
                                f"cannot be read: {exc.description or 'JetStream is off'}"))
            continue
        replicas[name] = info.config.num_replicas or 1
        cluster = cluster or (info.cluster.name if info.cluster is not None else None)
        problems = [] if is_kv_stream(name) else incompatibilities(wanted, info.config)
        if problems:
            checks.append(Check(f"stream {name}", Status.FAIL, "; ".join(problems)))
            continue
        shown = (f"R{replicas[name]}, {info.state.messages} message(s), "
                 f"{info.state.bytes / 2**20:.1f} MiB")
        if not info.config.allow_atomic and name != Names(settings.prefix).replicas_stream:
            checks.append(Check(f"stream {name}", Status.WARN,
                                f"{shown}; set up by an older release without atomic batches "
                                "(allow_atomic): written one message at a time, slower; an "
                                "administrator can turn it on"))
            continue
        checks.append(Check(f"stream {name}", Status.OK, shown))
    return checks, replicas, cluster


async def _retention(nc: Client, settings: NatsSettings, log: ViolationLog) -> Check:
    stream = Names(settings.prefix).index_stream
    mark = log.mark()
    try:
        found = await index_retention(nc.jetstream(timeout=_TIMEOUT), Names(settings.prefix))
    except (TimeoutError, nats.errors.TimeoutError):
        refused = log.refused_since(mark, "publish", stream_info_subject(stream))
        return Check("history retention", Status.WARN,
                     f"unknown: {'this user may not read' if refused else 'no answer for'} "
                     f"stream {stream}")
    except nats.js.errors.APIError as exc:  # JetStream off or unusable: said above
        return Check("history retention", Status.WARN,
                     f"unknown: stream {stream} cannot be read "
                     f"({exc.description or 'JetStream is off'})")
    return retention_check(stream, found, settings)


def _fetch_varz(url: str) -> Varz:
    target = url.rstrip("/") + "/varz"
    try:
        with urllib.request.urlopen(target, timeout=_TIMEOUT) as resp:
            data = json.loads(resp.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return Varz(url, None, error=f"could not read {target}: {exc}")
    if not isinstance(data, dict):
        return Varz(url, None, error="unexpected /varz answer")
    return parse_varz(url, data)


async def _durability(monitor_url: str | None) -> Check:
    urls = [u.strip() for u in (monitor_url or "").split(",") if u.strip()]
    nodes = await asyncio.gather(*(asyncio.to_thread(_fetch_varz, u) for u in urls))
    return durability_check(list(nodes))


class _Replica(msgspec.Struct):
    identity: str
    server_offset: float | None = None


@dataclass(frozen=True)
class _Offsets:
    """What the replicas that answered said of their host clocks against the store's."""

    measured: dict[str, float]
    unmeasured: list[str]


async def _replica_clocks(
    nc: Client, names: Names, log: ViolationLog, timeout: float = 1.0, settle: float = 0.15
) -> _Offsets | str:
    """Every live replica's own measure of its host clock against the store's, or why they
    could not be asked.

    A scatter-gather on ``<P>.admin.replica.status``, which every provider process answers
    with its ``server_offset`` (admin/service.py): the replica measured it from its own
    writes' server timestamps, so the doctor's clock and the request's latency play no part.
    """
    subject = names.admin_subject(REPLICA_STATUS_ENDPOINT)
    answers: asyncio.Queue[Msg] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    async def collect(msg: Msg) -> None:
        await answers.put(msg)

    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=collect)
    try:
        mark = log.mark()
        await nc.publish(subject, b"{}", reply=inbox)
        await log.settle(nc, _TIMEOUT)
        if log.refused_since(mark, "publish", subject):
            return "this user may not ask the replicas (admin replica.status)"
        found = _Offsets(measured={}, unmeasured=[])
        deadline = loop.time() + timeout
        while (remaining := deadline - loop.time()) > 0:
            answered = bool(found.measured or found.unmeasured)
            try:
                msg = await asyncio.wait_for(answers.get(),
                                             min(remaining, settle) if answered else remaining)
            except TimeoutError:
                break
            if (msg.headers or {}).get(HDR_STATUS) == "503":
                return "no scheduler process is running"
            try:
                replica = msgspec.json.decode(msg.data, type=_Replica)
            except (msgspec.ValidationError, msgspec.DecodeError):
                continue
            if replica.server_offset is None:
                found.unmeasured.append(replica.identity)
            else:
                found.measured[replica.identity] = replica.server_offset
        return found if found.measured or found.unmeasured else "no scheduler process answered"
    finally:
        await sub.unsubscribe()


async def _clock(nc: Client, names: Names, log: ViolationLog) -> tuple[Check, int | None]:
    """The clock check, and how many replicas answered (None: unknown)."""
    found = await _replica_clocks(nc, names, log)
    if isinstance(found, str):
        return clock_check(None, reason=found), None
    return (clock_check(found.measured, found.unmeasured),
            len(found.measured) + len(found.unmeasured))


def herd_check(busiest: tuple[datetime | None, int], replicas: int | None) -> Check:
    """WARN when more Schedules share one minute than the live replicas start within the
    stated lateness (core/herd.py); with no replica answering, one is assumed."""
    minute, due = busiest
    if minute is None:
        return Check("busiest minute", Status.OK, "no Schedule is due in the next 24 h")
    live = replicas or 1
    capacity = herd_capacity(live)
    counted = f"{live} live replica(s)" if replicas else "1 replica assumed (none answered)"
    shown = (f"{due:,} Schedule(s) due at {minute.strftime('%Y-%m-%d %H:%M')} UTC; {counted} "
             f"start about {capacity:,} within {HERD_LATENESS_SECONDS:.0f} s")
    if due > capacity:
        return Check("busiest minute", Status.WARN,
                     f"{shown}: run {replicas_needed(due)} replicas (one core each), or "
                     "spread the Schedules over more minutes")
    return Check("busiest minute", Status.OK, shown)


async def _herd(nc: Client, settings: NatsSettings, replicas: int | None) -> Check:
    try:
        table = await StoreReader(nc, settings.prefix, timeout=_TIMEOUT).schedule_table()
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
        nc, log = await _connect(settings)
    except SchedulerError as exc:
        return DoctorReport([Check("connection", Status.FAIL, str(exc)),
                             await _durability(monitor_url)])
    try:
        # nats-py keeps the server's INFO (server name, cluster, connect URLs) to itself:
        # nats-io/nats.py nats/aio/client.py Client has no public property for them. The
        # version, the address and the server pool are public; streams name the cluster.
        version = server_version(nc)
        names = Names(settings.prefix)
        where = nc.connected_url.netloc if nc.connected_url else "?"
        checks = [Check("connection", Status.OK, f"nats-server {version or '?'} at {where}"),
                  version_check(version),
                  await _jetstream_check(nc, log)]
        stream_checks, replicas, cluster = await _stream_checks(nc, settings, log)
        checks += stream_checks
        checks.append(await _retention(nc, settings, log))
        nodes = len({url.netloc for url in nc.servers})
        checks.append(replication_check(cluster, nodes, replicas, settings.replicas))
        checks.append(await _durability(monitor_url))
        checks.append(permissions_check(await capabilities(nc, log, names, _TIMEOUT)))
        clock, live = await _clock(nc, names, log)
        checks.append(clock)
        checks.append(await _herd(nc, settings, live))
        return DoctorReport(checks)
    finally:
        await nc.close()

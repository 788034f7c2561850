"""``nats-scheduler doctor``: what this store can promise, checked one line at a time.

The provider's guarantees rest on the server (docs/configuration.md): a version with the
conditional-publish fixes (2.12.3+), JetStream, the streams and bucket set up as the
provider needs them, the history retention they enforce, replicas on a cluster,
``sync_interval: always``, least-privilege users and hosts' clocks near the store's.
:func:`run_doctor` checks each and says what to do.

The doctor talks to operators of NATS, so unlike the provider's errors (docs/contract.md,
"Errors") its messages use NATS words: they must name the setting to change.

Every check is split into a small pure *decision* (the ``*_check`` functions of
``admin/doctor_checks.py``, tested with plain dicts, importable from here too) and the I/O
here that gathers its inputs (:func:`run_doctor`).
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from dataclasses import dataclass

import msgspec
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import StreamConfig

from ..clock import SystemClock
from ..core.herd import busiest_minute
from ..jetstream.connection import connect, jetstream_off, server_version
from ..jetstream.outages import stream_config as outage_stream_config
from ..jetstream.setup import incompatibilities
from ..jetstream.store import Store
from ..names import HDR_STATUS, JS_API_INFO, Names, is_kv_stream, stream_info_subject
from ..seam import SchedulerError
from ..settings import NatsSettings
from .doctor_checks import (
    CLOCK_CHECK,
    Check,
    DoctorReport,
    Status,
    Varz,
    clock_check,
    durability_check,
    herd_check,
    parse_varz,
    permissions_check,
    replication_check,
    retention_check,
    version_check,
)
from .permissions import ViolationLog, capabilities
from .reader import REPLICA_STATUS_ENDPOINT, StoreReader, index_retention

__all__ = [
    "CLOCK_CHECK",
    "Check",
    "DoctorReport",
    "Status",
    "Varz",
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
    configs.append(outage_stream_config(names, settings))  # created once a replica joined
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


async def _durability(monitor_url: str | None, declared: bool) -> Check:
    urls = [u.strip() for u in (monitor_url or "").split(",") if u.strip()]
    nodes = await asyncio.gather(*(asyncio.to_thread(_fetch_varz, u) for u in urls))
    return durability_check(list(nodes), declared)


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
                             await _durability(monitor_url, settings.server_sync_always)])
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
        checks.append(await _durability(monitor_url, settings.server_sync_always))
        checks.append(permissions_check(await capabilities(nc, log, names, _TIMEOUT)))
        clock, live = await _clock(nc, names, log)
        checks.append(clock)
        checks.append(await _herd(nc, settings, live))
        return DoctorReport(checks)
    finally:
        await nc.close()

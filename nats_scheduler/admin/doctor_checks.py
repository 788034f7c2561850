"""The doctor's decisions: each check of ``nats-scheduler doctor`` as a small pure function
from what was gathered to one line of the report (``admin/doctor.py`` gathers the inputs).

Tested with plain values (``tests/test_doctor.py``, ``tests/test_herd.py``). The doctor
talks to operators of NATS, so its messages use NATS words: they name the setting to change.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from ..core.herd import HERD_LATENESS_SECONDS, herd_capacity, replicas_needed
from ..core.serving import Serving, serves, serving_of
from ..jetstream.connection import MIN_SERVER_VERSION, parse_version
from ..jetstream.store_reads import Retention
from ..names import HDR_REQUEST_INFO
from ..settings import NatsSettings
from .serving import why_not
from .skew import OFFSET_FAIL_SECONDS, OFFSET_WARN_SECONDS, offset_level

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


REQUEST_INFO_PROVEN = (2, 12, 6)
"""The first 2.12 server whose ``Nats-Request-Info`` a client cannot forge (CVE-2026-33223
and, for leaf nodes, CVE-2026-33246): the admin service records who acted from it."""


def version_check(text: str) -> Check:
    """FAIL below 2.12.3: ``start()`` refuses such a server (Store.check_server). WARN below
    2.12.6: the user an operator action records could be forged (admin/callers.py)."""
    version = parse_version(text)
    if version < MIN_SERVER_VERSION:
        return Check("server version", Status.FAIL,
                     f"{text or 'unknown'}: the provider needs {_MIN} or newer (conditional "
                     f"publishes had clustered-correctness fixes up to {_MIN}); upgrade")
    if version < REQUEST_INFO_PROVEN:
        return Check("server version", Status.WARN,
                     f"{text}: the server does not fully strip a client's {HDR_REQUEST_INFO} "
                     "header (CVE-2026-33223, CVE-2026-33246), so the user an operator action "
                     "records could be forged; upgrade to 2.12.6 or newer")
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


def durability_check(nodes: Sequence[Varz], declared: bool | None = None) -> Check:
    """WARN unless every node's monitoring endpoint shows ``sync_interval: always``, and
    when ``declared`` (the setting ``server_sync_always``) disagrees with what they show:
    the provider sizes its atomic batches by it (jetstream/acks.py)."""
    if not nodes:
        return Check("durability", Status.WARN,
                     "unknown: no monitoring URL given (doctor --monitor-url "
                     "http://HOST:8222[,...]) to check sync_interval")
    lax = [n for n in nodes if n.sync_always is False]
    unknown = [n for n in nodes if n.sync_always is None]
    if lax:
        shown = ", ".join(f"{n.url} ({_duration(n.sync_interval_ns)})" for n in lax)
        mismatch = (f"; and {_SYNC_SETTING}=true says it does: small atomic batches cost "
                    f"more than plain publishes on such a server, unset it"
                    if declared else "")
        return Check("durability", Status.WARN,
                     f"sync_interval is not 'always' on {shown}: the server acknowledges "
                     "writes before they reach disk, and a crash or power loss can lose an "
                     "acknowledged Run; set `jetstream { sync_interval: always }`" + mismatch)
    if unknown:
        shown = ", ".join(f"{n.url} ({n.error})" for n in unknown)
        return Check("durability", Status.WARN, f"unknown on {shown}")
    if declared is False:
        return Check("durability", Status.WARN,
                     f"sync_interval always (fsync before ack) on {len(nodes)} node(s), but "
                     f"{_SYNC_SETTING} is not set: set it to true, so that writes made "
                     "together leave as atomic batches from 16 messages on (one sync each), "
                     "not 64 (docs/configuration.md)")
    return Check("durability", Status.OK,
                 f"sync_interval always (fsync before ack) on {len(nodes)} node(s)")


_SYNC_SETTING = "ASTRABOX_NATS_SERVER_SYNC_ALWAYS"


_WRITES = ("append Schedule events", "append Run events", "change leases", "announce replicas",
           "create streams")
_DESTROY = ("delete streams", "purge streams", "delete events")
_INDEX_READ = "read the history index"


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
    if all(abilities.get(a) for a in _WRITES) and not abilities.get(_INDEX_READ, True):
        return Check("permissions", Status.WARN,
                     "a scheduler user of a configuration older than this release: it cannot "
                     "read a deployment's last history entry from the stream leader, which "
                     "adding Runs to the history in order needs (the 'scheduler' user of "
                     f"nats-server.conf may). {detail}")
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
                     "Replicas fire by the store's clock, but one without an estimate "
                     "(before its first sample after a restart) reads its host clock, early "
                     "or late by this much; fix NTP on that host")
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


ADMIN_SERVICE_CHECK = "admin service"

_BENIGN = frozenset({Serving.YES, Serving.OFF, Serving.STARTING})
"""Words that need no fix: serving, turned off on purpose (a host that serves it
elsewhere), or about to start."""


def admin_service_check(live: Mapping[str, str | None] | None, reason: str = "") -> Check:
    """Whether the live replicas serve the admin service, as their keys in the replicas
    bucket say (identity -> word, ``core/serving.py``; None: the bucket could not be read,
    ``reason`` says why). FAIL when none serves (every action fails), WARN when some do
    not for a reason that needs a fix (the server refused them it, say)."""
    if live is None:
        return Check(ADMIN_SERVICE_CHECK, Status.WARN, f"unknown: {reason or 'no answer'}")
    if not live:
        return Check(ADMIN_SERVICE_CHECK, Status.WARN,
                     "unknown: no scheduler replica is alive (none in the replicas bucket)")
    apart = {i: w for i, w in sorted(live.items()) if serves(w) is not True}
    serving = len(live) - len(apart)
    shown = f"{serving} of {len(live)} live replica(s) serve it"
    if not apart:
        return Check(ADMIN_SERVICE_CHECK, Status.OK, shown)
    listed = [f"{i}: {why_not(w)}" for i, w in list(apart.items())[:5]]
    more = f"; and {len(apart) - 5} more" if len(apart) > 5 else ""
    detail = f"{shown}; {'; '.join(listed)}{more}"
    if not serving and all(serves(w) is False for w in apart.values()):
        return Check(ADMIN_SERVICE_CHECK, Status.FAIL,
                     f"no live replica serves it: actions (hold, release, Run now, Replay) "
                     f"fail. {detail}")
    if any(serving_of(w) not in _BENIGN for w in apart.values()):
        return Check(ADMIN_SERVICE_CHECK, Status.WARN, detail)
    return Check(ADMIN_SERVICE_CHECK, Status.OK, detail)


FOREIGN_CHECK = "foreign messages"
FOREIGN_SHOWN = 5
"""Foreign messages the check names (``nats-scheduler check`` lists every one)."""


def foreign_check(seen: Mapping[str, Sequence[str]] | None, found: Sequence[str] | None,
                  ) -> Check:
    """Messages in the store that are not the scheduler's own (jetstream/foreign.py): the
    latest ones each live replica's readers skipped (identity -> ``subject#seq (kind): why``;
    None: none answered) and those ``found`` in the buckets and outage records (None: not
    readable by this user). FAIL when there is any: nothing is wedged by one, but something
    with the scheduler's login wrote it, or a newer release, or the disk damaged it."""
    named = sorted({*(m for messages in (seen or {}).values() for m in messages),
                    *(found or ())})
    if named:
        listed = "; ".join(named[:FOREIGN_SHOWN])
        more = f"; and {len(named) - FOREIGN_SHOWN} more" if len(named) > FOREIGN_SHOWN else ""
        return Check(FOREIGN_CHECK, Status.FAIL,
                     f"{len(named)} found: {listed}{more}. Every reader skips them; "
                     "`nats-scheduler check` lists them all, docs/failure-modes.md "
                     "(\"Foreign messages\") says how to remove them")
    if seen is None and found is None:
        return Check(FOREIGN_CHECK, Status.WARN, "unknown: no replica answered and the "
                     "buckets could not be read")
    return Check(FOREIGN_CHECK, Status.OK, "none seen by the replicas that answered, none in "
                 "the buckets and outage records (`nats-scheduler check` reads every event)")

"""The doctor's probes of the server: what it answers, told in the scheduler's terms.

``nats-scheduler doctor`` (``admin/doctor.py``) decides what each answer means for the
provider's guarantees and how to word it; this module asks. Each probe returns the facts
(:class:`AccountUsage`, :class:`StreamFacts`, a :class:`~.store_reads.Retention`, the
replicas' raw answers) or a :class:`NoAnswer` saying why there are none: the stream is
missing, the server refused this user the request (a permission, seen in the
:class:`~.permissions.ViolationLog` the connection reports to), nobody answered, JetStream is
off, or JetStream answered with an error. nats-py's exceptions stay here.

A refused request simply times out, so a timeout is told apart from a refusal by the log:
the refusal of the request's subject arrived after the probe's mark.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from enum import Enum

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import StreamConfig

from ..names import HDR_STATUS, JS_API_INFO, Names, is_kv_stream, stream_info_subject
from ..settings import NatsSettings
from .connection import connect, jetstream_off, server_version
from .outages import stream_config as outage_stream_config
from .permissions import ViolationLog, capabilities
from .setup import incompatibilities
from .store import Store
from .store_reads import Retention, index_retention


class Unanswered(Enum):
    """Why a probe has no facts to give."""

    MISSING = "missing"
    """The stream does not exist."""
    REFUSED = "refused"
    """The server refused this user the request (a permission)."""
    SILENT = "silent"
    """Nobody answered in time."""
    NO_RESPONDERS = "no-responders"
    """The server said at once that nobody listens on the subject."""
    OFF = "off"
    """JetStream is off on the server: nobody answers its API."""
    UNUSABLE = "unusable"
    """JetStream answered with an error (``NoAnswer.detail``, possibly empty)."""


@dataclass(frozen=True)
class NoAnswer:
    """A probe without facts, and why."""

    why: Unanswered
    detail: str = ""
    """The server's description of an UNUSABLE answer ("" when it gave none)."""


@dataclass(frozen=True)
class AccountUsage:
    """What the account's JetStream information says of its use."""

    streams: int
    storage: int
    """Bytes on disk."""
    max_storage: int
    """The account's storage limit in bytes; negative: none."""


@dataclass(frozen=True)
class StreamFacts:
    """One stream (or bucket) of the scheduler as the server has it."""

    name: str
    replicas: int
    cluster: str | None
    problems: list[str]
    """How its configuration differs from what the provider sets up (none for buckets)."""
    messages: int
    bytes: int
    atomic: bool
    """Whether it takes atomic batches (``allow_atomic``)."""


def fetch_varz(url: str, timeout: float) -> dict[str, object] | str:
    """The ``/varz`` of the server whose monitoring base URL is ``url``, or why not (text).
    Blocking: run it in a thread."""
    target = url.rstrip("/") + "/varz"
    try:
        with urllib.request.urlopen(target, timeout=timeout) as resp:
            data = json.loads(resp.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"could not read {target}: {exc}"
    if not isinstance(data, dict):
        return "unexpected /varz answer"
    return data


class ServerProbe:
    """One connection of the doctor and the log of the refusals the server sent on it.

    Open with :meth:`open` (the provider's own connect, its clean errors); close with
    :meth:`close`.
    """

    def __init__(self, nc: Client, log: ViolationLog, timeout: float) -> None:
        self.nc = nc
        self.log = log
        self.timeout = timeout

    @classmethod
    async def open(cls, settings: NatsSettings, timeout: float) -> ServerProbe:
        """Connect with ``settings``, permission refusals recorded. Raises the seam's
        errors (``SchedulerError``) when no connection can be made."""
        log = ViolationLog()
        nc = await connect(settings, "nats-scheduler doctor", error_cb=log.on_error)
        return cls(nc, log, timeout)

    async def close(self) -> None:
        await self.nc.close()

    # ------------------------------------------------------------------ the server
    # nats-py keeps the server's INFO (server name, cluster, connect URLs) to itself:
    # nats-io/nats.py nats/aio/client.py Client has no public property for them. The
    # version, the address and the server pool are public; streams name the cluster.

    @property
    def version(self) -> str:
        """The server's version, "" when unknown."""
        return server_version(self.nc)

    @property
    def where(self) -> str:
        """The address of the server connected to."""
        return self.nc.connected_url.netloc if self.nc.connected_url else "?"

    @property
    def nodes(self) -> int:
        """How many servers the connection knows of (its pool: a cluster's members)."""
        return len({url.netloc for url in self.nc.servers})

    def _unanswered(self, mark: int, subject: str) -> NoAnswer:
        refused = self.log.refused_since(mark, "publish", subject)
        return NoAnswer(Unanswered.REFUSED if refused else Unanswered.SILENT)

    async def jetstream(self) -> AccountUsage | NoAnswer:
        """The account's JetStream use, or why it is not usable."""
        mark = self.log.mark()
        try:
            account = await self.nc.jetstream(timeout=self.timeout).account_info()
        except nats.js.errors.APIError as exc:
            if jetstream_off(exc) and exc.err_code is None:  # nobody answers the API
                return NoAnswer(Unanswered.OFF)
            return NoAnswer(Unanswered.UNUSABLE, exc.description or "")
        except (TimeoutError, nats.errors.TimeoutError):
            return self._unanswered(mark, JS_API_INFO)
        return AccountUsage(streams=account.streams, storage=account.storage,
                            max_storage=account.limits.max_storage)

    def _wanted(self, settings: NatsSettings) -> list[StreamConfig]:
        """The streams and buckets the provider sets up, and the outage records' stream
        (created once a replica joined)."""
        names = Names(settings.prefix)
        configs = Store(self.nc, settings).stream_configs()
        configs.append(StreamConfig(name=names.leases_stream, subjects=[names.leases_filter]))
        configs.append(StreamConfig(name=names.replicas_stream,
                                    subjects=[names.replicas_filter]))
        configs.append(outage_stream_config(names, settings))
        return configs

    async def streams(self, settings: NatsSettings) -> list[tuple[str, StreamFacts | NoAnswer]]:
        """Each stream and bucket of the scheduler by name, with its facts or why none."""
        js = self.nc.jetstream(timeout=self.timeout)
        found: list[tuple[str, StreamFacts | NoAnswer]] = []
        for wanted in self._wanted(settings):
            name = str(wanted.name)
            mark = self.log.mark()
            try:
                info = await js.stream_info(name)
            except nats.js.errors.NotFoundError:
                found.append((name, NoAnswer(Unanswered.MISSING)))
                continue
            except (TimeoutError, nats.errors.TimeoutError):
                found.append((name, self._unanswered(mark, stream_info_subject(name))))
                continue
            except nats.js.errors.APIError as exc:  # JetStream off or unusable
                found.append((name, NoAnswer(Unanswered.UNUSABLE, exc.description or "")))
                continue
            found.append((name, StreamFacts(
                name=name, replicas=info.config.num_replicas or 1,
                cluster=info.cluster.name if info.cluster is not None else None,
                problems=[] if is_kv_stream(name) else incompatibilities(wanted, info.config),
                messages=info.state.messages, bytes=info.state.bytes,
                atomic=bool(info.config.allow_atomic))))
        return found

    async def retention(self, names: Names) -> Retention | NoAnswer | None:
        """The history retention in force (None: no index stream yet), or why unknown."""
        mark = self.log.mark()
        try:
            return await index_retention(self.nc, names, timeout=self.timeout)
        except (TimeoutError, nats.errors.TimeoutError):
            return self._unanswered(mark, stream_info_subject(names.index_stream))
        except nats.js.errors.APIError as exc:  # JetStream off or unusable
            return NoAnswer(Unanswered.UNUSABLE, exc.description or "")

    async def capabilities(self, names: Names) -> dict[str, bool]:
        """ability -> allowed, for every permission probe (:mod:`.permissions`)."""
        return await capabilities(self.nc, self.log, names, self.timeout)

    async def ask_all(self, subject: str, timeout: float = 1.0, settle: float = 0.15
                      ) -> list[bytes] | NoAnswer:
        """Scatter-gather on ``subject``: every answer until ``settle`` seconds after the
        last one (or ``timeout`` without any); REFUSED when this user may not ask,
        NO_RESPONDERS when the server says nobody listens."""
        answers: asyncio.Queue[Msg] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        async def collect(msg: Msg) -> None:
            await answers.put(msg)

        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox, cb=collect)
        try:
            mark = self.log.mark()
            await self.nc.publish(subject, b"{}", reply=inbox)
            await self.log.settle(self.nc, self.timeout)
            if self.log.refused_since(mark, "publish", subject):
                return NoAnswer(Unanswered.REFUSED)
            found: list[bytes] = []
            deadline = loop.time() + timeout
            while (remaining := deadline - loop.time()) > 0:
                try:
                    msg = await asyncio.wait_for(answers.get(),
                                                 min(remaining, settle) if found else remaining)
                except TimeoutError:
                    break
                if (msg.headers or {}).get(HDR_STATUS) == "503":
                    return NoAnswer(Unanswered.NO_RESPONDERS)
                found.append(msg.data)
            return found
        finally:
            await sub.unsubscribe()


__all__ = ["AccountUsage", "NoAnswer", "ServerProbe", "StreamFacts", "Unanswered",
           "fetch_varz"]

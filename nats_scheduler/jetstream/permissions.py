"""What the connected user may do, found out without changing anything in the store.

The server refuses a publish or a subscription outside a user's permissions by dropping it
and sending ``-ERR 'Permissions Violation for Publish to "<subject>"'`` on the connection;
a request to a refused subject simply times out. nats-py passes that ``-ERR`` to the
connection's error callback (lower-cased). The server answers one connection's commands in
order, so once the PONG to a PING sent *after* a command has arrived, any violation that
command caused has been reported: :meth:`ViolationLog.allowed` is exact and needs no
timeout guesswork. It flushes twice because nats-py 2.16 writes a flush's PING straight to
the socket, possibly ahead of commands still queued for its flusher task; the first
round trip lets the flusher write them, the second PING follows them on the wire.

Each :class:`Probe` is chosen so that, when the server lets it through, it still changes
nothing: appends carry an expected last sequence no subject has, stream requests name a
stream that does not exist or disagree with their own subject, and admin requests have no
valid body. ``nats-scheduler doctor`` reports the result; the permission tests use the same
probes to prove every rule of ``nats-server.conf``.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Literal

from nats.aio.client import Client

from ..names import (
    HDR_EXPECTED_LAST_SUBJECT_SEQUENCE,
    Names,
    consumer_create_subject,
    stream_create_subject,
    stream_delete_subject,
    stream_info_subject,
    stream_msg_delete_subject,
    stream_msg_get_subject,
    stream_purge_subject,
)

Kind = Literal["publish", "subscription"]

_VIOLATION = re.compile(r'permissions violation for (publish|subscription) to "([^"]*)"',
                        re.IGNORECASE)
_IMPOSSIBLE_SEQUENCE = "999999999999"
"""An expected last subject sequence no probe subject has: the store refuses the append."""


class ViolationLog:
    """Records the server's permission refusals; pass :meth:`on_error` as ``error_cb``.

    Create the log BEFORE connecting and hand its callback to the connect call
    (``nats.connect(error_cb=log.on_error)`` or ``connection.connect(error_cb=...)``):
    nats-py has no public way to add an error callback to a connected client.
    Other errors are ignored here: connection trouble surfaces where the caller awaits.

    It keeps the newest ``KEPT`` refusals only: a provider's connection lives for months,
    and what is looked at is always what came after a recent :meth:`mark`.
    """

    KEPT = 1024

    def __init__(self) -> None:
        self.refusals: list[tuple[Kind, str]] = []
        self._dropped = 0
        """Refusals dropped from the front of ``refusals`` (marks count them)."""

    async def on_error(self, exc: Exception) -> None:
        """The ``error_cb`` of ``nats.connect`` (nats-py wants a coroutine function)."""
        match = _VIOLATION.search(str(exc))
        if match is not None:
            kind: Kind = "publish" if match.group(1).lower() == "publish" else "subscription"
            self.refusals.append((kind, match.group(2).lower()))
            if len(self.refusals) > 2 * self.KEPT:
                drop = len(self.refusals) - self.KEPT
                del self.refusals[:drop]
                self._dropped += drop

    def mark(self) -> int:
        """A position in the log; :meth:`refused_since` looks only at what came after it."""
        return self._dropped + len(self.refusals)

    def since(self, mark: int) -> list[tuple[Kind, str]]:
        """The refusals (kind, subject lower-cased) that came after ``mark``."""
        return self.refusals[max(0, mark - self._dropped):]

    def refused_since(self, mark: int, kind: Kind, subject: str) -> bool:
        wanted = (kind, subject.lower())
        return wanted in self.since(mark)

    async def allowed(self, nc: Client, probe: Probe, timeout: float = 2.0) -> bool:
        """Send ``probe`` and tell whether the server let it through."""
        mark = self.mark()
        if probe.kind == "subscription":
            sub = await nc.subscribe(probe.subject)
            await self.settle(nc, timeout)
            await sub.unsubscribe()
        else:
            await nc.publish(probe.subject, probe.payload, reply=nc.new_inbox(),
                             headers=probe.headers)
            await self.settle(nc, timeout)
        return not self.refused_since(mark, probe.kind, probe.subject)

    @staticmethod
    async def settle(nc: Client, timeout: float = 2.0) -> None:
        """Return once the server has answered every command sent so far (two flushes)."""
        await nc.flush(timeout)
        await nc.flush(timeout)


@dataclass(frozen=True)
class Probe:
    """One harmless attempt at something a user may or may not be allowed to do."""

    ability: str
    subject: str
    kind: Kind = "publish"
    payload: bytes = b""
    headers: dict[str, str] | None = None
    mutating: bool = False


def probes(names: Names, nonce: str | None = None) -> list[Probe]:
    """The probes for the scheduler's streams, buckets and admin service under ``names``."""
    nonce = nonce or secrets.token_hex(4)
    probe_id = names.lease_key(f"doctor-probe-{nonce}")
    probe_replica = f"doctor-probe-{nonce}"
    absent_stream = names.absent_stream(nonce)
    never = {HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: _IMPOSSIBLE_SEQUENCE}
    return [
        Probe("read events", stream_msg_get_subject(names.runs_stream),
              payload=b'{"last_by_subj": "%s"}' % names.run_subject(probe_id, probe_id).encode()),
        Probe("read the history index", stream_msg_get_subject(names.index_stream),
              payload=b'{"last_by_subj": "%s"}' % names.index_subject(probe_id).encode()),
        Probe("watch events", consumer_create_subject(names.runs_stream),
              payload=b'{"stream_name": "%s"}' % absent_stream.encode()),
        Probe("read leases", stream_info_subject(names.leases_stream)),
        Probe("read replicas", stream_info_subject(names.replicas_stream)),
        Probe("read through the admin service", names.admin_subject("health")),
        Probe("request actions (hold, release, Run now, Replay)",
              names.admin_subject("schedules.hold"), mutating=True),
        Probe("append Schedule events", names.schedule_subject(probe_id),
              payload=b"{}", headers=never, mutating=True),
        Probe("append Run events", names.run_subject(probe_id, probe_id),
              payload=b"{}", headers=never, mutating=True),
        Probe("change leases", names.lease_subject(probe_id),
              payload=b"{}", headers=never, mutating=True),
        Probe("announce replicas", names.replica_subject(probe_replica),
              payload=b"{}", headers=never, mutating=True),
        Probe("create streams", stream_create_subject(names.runs_stream),
              payload=b'{"name": "%s"}' % absent_stream.encode(), mutating=True),
        Probe("delete streams", stream_delete_subject(absent_stream), mutating=True),
        Probe("purge streams", stream_purge_subject(absent_stream), mutating=True),
        Probe("delete events", stream_msg_delete_subject(absent_stream), mutating=True),
        Probe("serve the admin service", names.admin_filter, kind="subscription",
              mutating=True),
    ]


async def capabilities(
    nc: Client, log: ViolationLog, names: Names, timeout: float = 2.0
) -> dict[str, bool]:
    """ability -> allowed, for every probe (``nc`` must report errors to ``log.on_error``)."""
    return {p.ability: await log.allowed(nc, p, timeout) for p in probes(names)}

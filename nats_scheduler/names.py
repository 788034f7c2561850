"""Every stream, subject, bucket and header name the provider uses, in one place.

Layout under a prefix ``P`` (``ASTRABOX_NATS_PREFIX``, default ``SCHED``)::

    stream  P_SCHEDULES   subjects P.sched.<deployment>           Schedule events
    stream  P_RUNS        subjects P.run.<deployment>.<run>       Run events
    stream  P_RUNINDEX    subjects P.runidx.<deployment>          history index, one entry per Run
    stream  P_CHECKPOINTS subjects P.checkpoint.head              Schedule table checkpoints:
                                   P.checkpoint.part.<id>         a head each, then its parts
    bucket  P_LEASES      keys     <run>                          open Runs and dispatch leases
    bucket  P_REPLICAS    keys     <identity>                     live provider replicas
    stream  P_OUTAGES     subject  P.outage                       spans with no replica alive
    service astrabox-scheduler (nats.micro)  subjects P.admin.>   admin service

``<deployment>`` and ``<run>`` are :func:`token` encodings of the IDs: any string AstraBox
sends becomes exactly one subject token, so an ID can never add a token, contain a wildcard
or widen a filter (``list_runs('a')`` never sees ``a.b``, whose token is ``a%2Eb``).
A bucket ``B`` is the stream ``KV_B`` and its key ``K`` the subject ``$KV.B.K``; the
server's own API is under ``$JS.API`` (built here too, for the permission probes and the
batched reads). docs/architecture.md and docs/audit.md show these names with sample messages.

Only constants and pure builders live here (tests/test_names.py holds every other module to
that: none spells a name itself). What is drawn or counted, such as the nonces in the
Msg-Ids of a writer's decisions, belongs to the writer (``jetstream/decisions.py``).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from .core.validation import check_id

# Header names, grouped by the ADR that defines them (see nats.js.api.Header). They live here,
# not in a ``jetstream/headers.py``, because the admin service's error headers are names of the
# same kind and are no part of ``jetstream/``: one module holds every name the provider uses.
# JetStream publish: de-duplication and optimistic concurrency.
HDR_MSG_ID = "Nats-Msg-Id"
HDR_EXPECTED_LAST_SUBJECT_SEQUENCE = "Nats-Expected-Last-Subject-Sequence"
# ADR-43: a message's own time to live (the stream allows it: ``allow_msg_ttl``).
HDR_TTL = "Nats-TTL"
# ADR-50: atomic batch publishes (the stream allows them: ``allow_atomic``).
HDR_BATCH_ID = "Nats-Batch-Id"
HDR_BATCH_SEQUENCE = "Nats-Batch-Sequence"
HDR_BATCH_COMMIT = "Nats-Batch-Commit"
# ADR-31: what a direct get answers with, on each message and on the end-of-batch status.
HDR_SEQUENCE = "Nats-Sequence"
HDR_SUBJECT = "Nats-Subject"
HDR_TIME_STAMP = "Nats-Time-Stamp"
HDR_NUM_PENDING = "Nats-Num-Pending"
HDR_LAST_SEQUENCE = "Nats-Last-Sequence"
# ADR-8: a key-value entry's operation (``DEL``, ``PURGE``; absent for a put).
HDR_KV_OPERATION = "KV-Operation"
# ADR-43: a marker the server stores when a key's message expires or is removed.
HDR_MARKER_REASON = "Nats-Marker-Reason"
# ADR-32 (nats.micro): an error answer of a service.
HDR_SERVICE_ERROR = "Nats-Service-Error"
HDR_SERVICE_ERROR_CODE = "Nats-Service-Error-Code"
# The server's proof of who sent a request (its ``ClientInfoHdr``): written by the server when
# a request crosses a service import with ``share: true``, replacing any value the client sent
# (nats-server 2.12.6 and 2.11.15 closed the gaps: CVE-2026-33223, CVE-2026-33246).
HDR_REQUEST_INFO = "Nats-Request-Info"
# The protocol's status line, as nats-py hands it over (``NATS/1.0 503 No Responders``).
HDR_STATUS = "Status"
HDR_DESCRIPTION = "Description"

# ------------------------------------------------------------------ the server's own subjects
JS_API = "$JS.API"
"""The JetStream API's subjects (ADR-1); a permission names them to allow or deny a call."""

JS_API_INFO = f"{JS_API}.INFO"
"""The account's JetStream information (``nats account info``)."""

_KV_STREAM_PREFIX = "KV_"


def stream_info_subject(stream: str) -> str:
    """The JetStream API call that reads a stream's configuration and state."""
    return f"{JS_API}.STREAM.INFO.{stream}"


def stream_create_subject(stream: str) -> str:
    return f"{JS_API}.STREAM.CREATE.{stream}"


def stream_delete_subject(stream: str) -> str:
    return f"{JS_API}.STREAM.DELETE.{stream}"


def stream_purge_subject(stream: str) -> str:
    return f"{JS_API}.STREAM.PURGE.{stream}"


def stream_msg_get_subject(stream: str) -> str:
    """The JetStream API call that reads one message from the stream leader."""
    return f"{JS_API}.STREAM.MSG.GET.{stream}"


def stream_msg_delete_subject(stream: str) -> str:
    return f"{JS_API}.STREAM.MSG.DELETE.{stream}"


def consumer_create_subject(stream: str) -> str:
    return f"{JS_API}.CONSUMER.CREATE.{stream}"


def direct_get_subject(stream: str) -> str:
    """A direct get (ADR-31): answered by any replica of the stream, batches included."""
    return f"{JS_API}.DIRECT.GET.{stream}"


def kv_stream(bucket: str) -> str:
    """The stream behind a key-value bucket (ADR-8)."""
    return f"{_KV_STREAM_PREFIX}{bucket}"


def is_kv_stream(stream: str) -> bool:
    """Whether a stream is the one behind a key-value bucket."""
    return stream.startswith(_KV_STREAM_PREFIX)


def kv_subject(bucket: str, key: str) -> str:
    """The subject a bucket's key is stored on (a KV key is a subject of its bucket)."""
    return f"$KV.{bucket}.{key}"


def kv_filter(bucket: str) -> str:
    """Every key of a bucket: its stream's subjects."""
    return f"$KV.{bucket}.>"


def inbox_filter(inbox: str) -> str:
    """Every reply subject under one inbox: a standing subscription answers many requests,
    each reply subject :func:`inbox_reply_prefix` plus a token of the request."""
    return f"{inbox}.*"


def inbox_reply_prefix(inbox: str) -> str:
    """What a reply subject under ``inbox`` starts with (the request's token follows)."""
    return f"{inbox}."


SERVICE_NAME = "astrabox-scheduler"

_SAFE_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_SAFE_TEXT = re.compile(r"[A-Za-z0-9_-]+")


def token(value: str) -> str:
    """Encode an ID as one subject token: bytes outside ``[A-Za-z0-9_-]`` become ``%XX``.

    Injective (``%`` itself is escaped), readable for ordinary IDs (``daily-report`` stays
    as it is), and never produces ``.``, ``*``, ``>``, whitespace or an empty token.
    Raises ValueError for an empty ID, one longer than 255 characters, or one that is not
    valid Unicode text (lone surrogates): the domain's rule, :func:`validation.check_id`.
    """
    check_id(value)
    if _SAFE_TEXT.fullmatch(value):
        return value  # the usual case, and a Run ID always: nothing to escape
    raw = value.encode("utf-8")
    return "".join(chr(b) if b in _SAFE_BYTES else f"%{b:02X}" for b in raw)


def untoken(tok: str) -> str:
    """The inverse of :func:`token`."""
    if "%" not in tok:
        return tok
    out = bytearray()
    i = 0
    while i < len(tok):
        if tok[i] == "%":
            out.append(int(tok[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(ord(tok[i]))
            i += 1
    return out.decode("utf-8")


def _digest(*parts: str) -> str:
    h = hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).digest()
    return base64.b32encode(h).decode("ascii").lower()[:25]


def due_token(due_at: datetime) -> str:
    """A due time as it appears in Run IDs and Msg-Ids: whole UTC minutes, ``2030-01-01T02:00Z``."""
    return due_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ")


def scheduled_run_id(deployment_id: str, due_at: datetime) -> str:
    """The Run ID of one due time of one deployment: the same on every replica."""
    return "s" + _digest("schedule", deployment_id, due_token(due_at))


def requested_run_id(deployment_id: str, request_id: str) -> str:
    """The Run ID of an enqueue with an idempotency key: the same for every retry."""
    return "q" + _digest("request", deployment_id, request_id)


def random_run_id() -> str:
    """A fresh Run ID for an enqueue without an idempotency key."""
    return "m" + base64.b32encode(os.urandom(16)).decode("ascii").lower()[:25]


# ------------------------------------------------------------------------- Msg-Ids
# Every append carries a Nats-Msg-Id. For a create it identifies the Run, so a resend after a
# lost acknowledgement is recognised as the sender's own success (docs/design.md, "Error 10071
# and the resend trap"); for later events it names the writer's decision (subject, expected
# sequence, a nonce), so two decisions are never mistaken for one.


def scheduled_create_msg_id(deployment_id: str, due_at: datetime) -> str:
    """Msg-Id of a scheduled Run's ``run.created``: ``<deployment token>@<due time>``.

    The same on every replica, so ``nats stream view`` shows which due time a Run is for
    (docs/audit.md).
    """
    return f"{token(deployment_id)}@{due_token(due_at)}"


def checkpoint_msg_id(checkpoint_id: str, part: int | None) -> str:
    """Msg-Id of one part of a checkpoint (``part`` None: its head): a resend after a lost
    acknowledgement is stored once."""
    return f"ckpt:{checkpoint_id}:{'head' if part is None else part}"


def outage_msg_id(start: datetime, end: datetime) -> str:
    """Msg-Id of an ``outage.recorded``: the span it records, to the microsecond (a resend
    after a lost acknowledgement is the same record)."""
    return f"outage:{_instant_token(start)}/{_instant_token(end)}"


def _instant_token(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def index_msg_id(run_id: str) -> str:
    """Msg-Id of a Run's history index entry: every replica announcing it writes one."""
    return f"idx:{run_id}"


def requested_create_msg_id(run_id: str) -> str:
    """Msg-Id of the ``run.created`` of an enqueue with an idempotency key."""
    return f"req:{run_id}"


def enqueued_create_msg_id(run_id: str) -> str:
    """Msg-Id of the ``run.created`` of an enqueue without an idempotency key."""
    return f"{run_id}:0"


def run_event_msg_id(run_id: str, expected_seq: int, decision: str) -> str:
    """Msg-Id of a later event of a Run, appended on ``expected_seq``.

    ``decision`` is the writer's nonce for this decision (``jetstream/decisions.py``)."""
    return f"{run_id}:{expected_seq}:{decision}"


def schedule_event_msg_id(deployment_id: str, expected_seq: int, decision: str) -> str:
    """Msg-Id of a Schedule event appended on ``expected_seq`` (``decision``: as above)."""
    return f"{token(deployment_id)}:{expected_seq}:{decision}"


@dataclass(frozen=True)
class Names:
    """The concrete names for one prefix."""

    prefix: str = "SCHED"

    @property
    def schedules_stream(self) -> str:
        return f"{self.prefix}_SCHEDULES"

    @property
    def runs_stream(self) -> str:
        return f"{self.prefix}_RUNS"

    @property
    def index_stream(self) -> str:
        """The history index: one small entry per Run, trimmed by the retention limits."""
        return f"{self.prefix}_RUNINDEX"

    @property
    def index_filter(self) -> str:
        return f"{self.prefix}.runidx.*"

    def index_subject(self, deployment_id: str) -> str:
        """The history index of one deployment, oldest entry first."""
        return f"{self.prefix}.runidx.{token(deployment_id)}"

    @property
    def leases_bucket(self) -> str:
        return f"{self.prefix}_LEASES"

    @property
    def leases_stream(self) -> str:
        """The stream behind the lease bucket (its keys' subjects: :meth:`lease_subject`)."""
        return kv_stream(self.leases_bucket)

    @property
    def leases_filter(self) -> str:
        """Every key of the lease bucket: its stream's subjects."""
        return kv_filter(self.leases_bucket)

    @property
    def replicas_bucket(self) -> str:
        """One key per live provider replica, re-put every beat (``jetstream/presence.py``)."""
        return f"{self.prefix}_REPLICAS"

    @property
    def replicas_stream(self) -> str:
        """The stream behind the replicas bucket (written without atomic batches)."""
        return kv_stream(self.replicas_bucket)

    @property
    def replicas_filter(self) -> str:
        return kv_filter(self.replicas_bucket)

    @property
    def outages_stream(self) -> str:
        """Spans in which no provider replica was alive, one event each, kept as long as the
        history (``jetstream/outages.py``)."""
        return f"{self.prefix}_OUTAGES"

    @property
    def outage_subject(self) -> str:
        """The one subject of the outage records: appended in order, by compare-and-set."""
        return f"{self.prefix}.outage"

    @property
    def outages_filter(self) -> str:
        """What the outage stream captures: every two-token subject of the prefix, the
        records' one among them. A wildcard on purpose: the server delivers a push
        consumer's messages only to a subject someone subscribed to by its exact name, and
        a stream's own subscription on a literal subject counts as one. With every stream
        on wildcards, a consumer whose deliver subject is a stream's subject delivers
        nothing (docs/configuration.md, "Users and permissions")."""
        return f"{self.prefix}.*"

    def is_outage_subject(self, subject: str) -> bool:
        return subject == self.outage_subject

    def absent_stream(self, nonce: str) -> str:
        """A stream name no installation uses: permission probes aim at it, so an allowed
        call finds nothing to change (``jetstream/permissions.py``)."""
        return f"{self.prefix}_DOCTOR_PROBE_{nonce.upper()}"

    @property
    def schedules_filter(self) -> str:
        return f"{self.prefix}.sched.*"

    @property
    def runs_filter(self) -> str:
        return f"{self.prefix}.run.*.*"

    @property
    def admin_prefix(self) -> str:
        return f"{self.prefix}.admin"

    def admin_subject(self, endpoint: str) -> str:
        """The subject of an admin service endpoint (``schedules.hold``, ``health``, ...)."""
        return f"{self.admin_prefix}.{endpoint}"

    @property
    def admin_filter(self) -> str:
        """Every admin endpoint: what a provider process subscribes to."""
        return f"{self.admin_prefix}.>"

    def schedule_subject(self, deployment_id: str) -> str:
        return f"{self.prefix}.sched.{token(deployment_id)}"

    def deployment_runs_filter(self, deployment_id: str) -> str:
        return f"{self.prefix}.run.{token(deployment_id)}.*"

    def run_subject(self, deployment_id: str, run_id: str) -> str:
        return f"{self.prefix}.run.{token(deployment_id)}.{token(run_id)}"

    def is_run_subject(self, subject: str) -> bool:
        """Whether ``subject`` is a Run's (stored in the runs stream), not a Schedule's."""
        return subject.startswith(f"{self.prefix}.run.")

    @property
    def checkpoints_stream(self) -> str:
        """Checkpoints of the Schedule table (``jetstream/checkpoints.py``): a cache a
        starting replica loads instead of replaying every Schedule's last event."""
        return f"{self.prefix}_CHECKPOINTS"

    @property
    def checkpoints_filter(self) -> str:
        return f"{self.prefix}.checkpoint.>"

    @property
    def checkpoint_head_subject(self) -> str:
        """One message per checkpoint written, the newest one counts (its id, its parts)."""
        return f"{self.prefix}.checkpoint.head"

    def checkpoint_parts_subject(self, checkpoint_id: str) -> str:
        """The parts of one checkpoint, in order (``checkpoint_id``: hex, one token)."""
        return f"{self.prefix}.checkpoint.part.{checkpoint_id}"

    @property
    def checkpoint_parts_filter(self) -> str:
        """The parts of every checkpoint."""
        return f"{self.prefix}.checkpoint.part.*"

    def is_checkpoint_subject(self, subject: str) -> bool:
        """Whether ``subject`` is a checkpoint's (stored in the checkpoints stream)."""
        return subject.startswith(f"{self.prefix}.checkpoint.")

    def is_index_subject(self, subject: str) -> bool:
        """Whether ``subject`` is a deployment's history index (stored in the index stream)."""
        return subject.startswith(f"{self.prefix}.runidx.")

    def run_lookup_filter(self, run_id: str) -> str:
        """Matches the one subject of ``run_id`` whatever its deployment."""
        return f"{self.prefix}.run.*.{token(run_id)}"

    def lease_key(self, run_id: str) -> str:
        """The lease bucket's key of a Run."""
        return token(run_id)

    def lease_subject(self, run_id: str) -> str:
        """The subject a Run's lease key is stored on (a KV key is a subject of its bucket)."""
        return kv_subject(self.leases_bucket, self.lease_key(run_id))

    def replica_key(self, identity: str) -> str:
        """The replicas bucket's key of a provider replica: its :func:`token`, with ``=``
        for ``%`` (a KV key may not hold ``%``; identities hold dots, e.g. a host name)."""
        return token(identity).replace("%", "=")

    def replica_subject(self, identity: str) -> str:
        """The subject a replica's key is stored on."""
        return kv_subject(self.replicas_bucket, self.replica_key(identity))

    def replica_of_key(self, key: str) -> str:
        """The inverse of :meth:`replica_key`."""
        return untoken(key.replace("=", "%"))

    def run_ids_of_subject(self, subject: str) -> tuple[str, str]:
        """(deployment_id, run_id) of a run subject."""
        _, _, dep, run = subject.split(".")
        return untoken(dep), untoken(run)

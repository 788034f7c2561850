"""Nobody but the provider's login can make anything land in the scheduler's store.

NATS checks a publish against its subject, never against the reply subject the client
names, and the JetStream API and every service answer on that reply subject inside the
requester's account. The shipped ``nats-server.conf`` therefore keeps operators and
auditors out of the store's account (``SCHED_OPS`` imports what they may ask for): across
an import the server gives each request a reply subject of its own, so whatever reply
subject they name, the answer lands in their own account, which stores nothing.

This test sends, as ``auditor`` and as ``operator``, every request their permissions allow
(read from the committed file itself: each ``allow`` entry of the user's publish
permissions, wildcards filled in) with every stream's and bucket's subject as the reply
subject, fresh ones and those of an existing Schedule, index, Run, lease and replica. It
also asks the server for consumers that push into those subjects, and pulls a consumer's
messages into them. Then it proves nothing was stored: every stream the provider does not
write by itself while idle ends where it began, and no message sits on an attacked subject
of the buckets. On the configuration before ``SCHED_OPS`` (both users in the store's
account) it fails: the answers land in the streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nats.errors
import pytest
from nats.aio.client import Client

from nats_scheduler.admin.service import ACTIONS
from nats_scheduler.names import Names, scheduled_run_id
from nats_scheduler.natsserver.config import REPO_CONFIG
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.seam import EnqueueRequest, RunPayload, RunState, Schedule, Trigger
from tests.providers import eventually
from tests.security_support import connect_as, prod_server, scheduler_with_service

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

NAMES = Names("SCHED")
DUE = datetime(2031, 1, 1, 3, 0, tzinfo=UTC)
STREAMS = (NAMES.schedules_stream, NAMES.runs_stream, NAMES.index_stream,
           NAMES.leases_stream, NAMES.replicas_stream, NAMES.outages_stream,
           NAMES.checkpoints_stream)
QUIET = (NAMES.schedules_stream, NAMES.runs_stream, NAMES.index_stream,
         NAMES.outages_stream, NAMES.checkpoints_stream)
"""Streams an idle provider writes nothing to (checkpoints begin at 20,000 Schedules)."""
ENDPOINTS = ("schedules.list", "schedules.get", "schedules.hold", "schedules.release",
             "schedules.hold_bulk", "schedules.release_bulk", "schedules.explain",
             "schedules.load", "runs.list", "runs.get", "runs.run_now", "runs.replay",
             "cluster.status", "health", "replica.status")


def allowed_publishes(user: str) -> list[str]:
    """The ``allow`` entries of ``user``'s publish permissions in the committed file."""
    text = REPO_CONFIG.read_text("utf-8")
    block = text[text.index(f"{user.upper()}_PERMISSIONS = {{"):]
    allow = block[block.index("allow: ["):block.index("]", block.index("allow: ["))]
    allow = "\n".join(line.split("#", 1)[0] for line in allow.splitlines())
    return re.findall(r'"([^"]+)"', allow)


def schedule(dep: str) -> Schedule:
    return Schedule(dep, f"name of {dep}", "0 3 1 1 *", "UTC", True,
                    RunPayload("agent://report", f"prompt of {dep}"), 1)


class Targets:
    """The reply subjects aimed at: every stream's and bucket's subjects, fresh and taken."""

    def __init__(self, run_id: str, replica: str) -> None:
        future = scheduled_run_id("dep-a", DUE + timedelta(days=366))
        self.subjects = [
            NAMES.schedule_subject("dep-a"), NAMES.schedule_subject("fresh-dep"),
            NAMES.index_subject("dep-a"), NAMES.index_subject("fresh-dep"),
            NAMES.run_subject("dep-a", run_id), NAMES.run_subject("dep-a", future),
            NAMES.lease_subject(run_id), NAMES.lease_subject(future),
            NAMES.replica_subject(replica), NAMES.replica_subject("fresh-replica"),
            NAMES.outage_subject, NAMES.checkpoint_head_subject,
            NAMES.checkpoint_parts_subject("fresh"),
        ]
        self.replica = NAMES.replica_subject(replica)


def requests_of(pattern: str, run_id: str, consumer: dict[str, str]) -> list[tuple[str, bytes]]:
    """Concrete requests for one ``allow`` entry: its subject, wildcards filled in, with a
    body the responder answers (actions: a body it refuses, so nothing is changed by the
    action itself and only its answer could land)."""
    if pattern.startswith("SCHED.admin."):
        endpoints = ENDPOINTS if pattern.endswith(">") else (pattern[len("SCHED.admin."):],)
        return [(NAMES.admin_subject(e), _admin_body(e, run_id)) for e in endpoints]
    if pattern.startswith("$SRV."):
        base = pattern.rstrip(".>")
        return [(base, b""), (f"{base}.astrabox-scheduler", b"")] if pattern.endswith(
            ">") and base != "$SRV" else [(s, b"") for s in ("$SRV.PING", "$SRV.INFO",
                                                              "$SRV.STATS")]
    parts = pattern.split(".")
    stream = next((s for s in STREAMS if s in parts), NAMES.runs_stream)
    subject = _subject_of(stream, run_id)
    if pattern.startswith("$JS.API.DIRECT.GET."):
        concrete = f"$JS.API.DIRECT.GET.{stream}" + (f".{subject}" if pattern.endswith(">")
                                                      else "")
        body = b"" if pattern.endswith(">") else json.dumps({"last_by_subj": subject}).encode()
        return [(concrete, body)]
    if pattern.startswith("$JS.API.STREAM.MSG.GET."):
        return [(pattern, json.dumps({"last_by_subj": subject}).encode())]
    if pattern.startswith("$JS.API.CONSUMER.CREATE."):
        name = f"atk{len(consumer)}"
        config = {"stream_name": stream, "config": {
            "name": name, "ack_policy": "none", "deliver_policy": "all",
            "inactive_threshold": 30_000_000_000}}
        concrete = (f"$JS.API.CONSUMER.CREATE.{stream}.{name}" if pattern.endswith(">")
                    else f"$JS.API.CONSUMER.CREATE.{stream}")
        if not pattern.endswith(">"):
            del config["config"]["name"]  # type: ignore[attr-defined]
        return [(concrete, json.dumps(config).encode())]
    if pattern.startswith("$JS.API.CONSUMER.MSG.NEXT."):
        return [(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer[stream]}",
                 json.dumps({"batch": 5, "expires": 500_000_000}).encode())]
    if pattern.startswith("$JS.API.CONSUMER.INFO."):
        return [(f"$JS.API.CONSUMER.INFO.{stream}.{consumer[stream]}", b"")]
    if pattern.startswith("$JS.ACK."):
        return [(f"$JS.ACK.{stream}.{consumer[stream]}.1.1.1.1.0", b"+ACK")]
    if pattern.startswith("$JS.FC."):
        return [(f"$JS.FC.{stream}.{consumer[stream]}.x", b"")]
    assert "*" not in pattern and ">" not in pattern, f"no concrete request for {pattern}"
    return [(pattern, b"")]


def _admin_body(endpoint: str, run_id: str) -> bytes:
    if endpoint in ACTIONS:  # refused by the service: the action itself changes nothing
        return json.dumps({"deployment_id": "no-such-dep", "run_id": "no-such-run",
                           "filter": "no-such-", "by": "atk", "reason": "atk"}).encode()
    return json.dumps({"deployment_id": "dep-a", "run_id": run_id} if endpoint in (
        "schedules.get", "schedules.explain", "runs.list", "runs.get") else {}).encode()


def _subject_of(stream: str, run_id: str) -> str:
    """A subject of ``stream`` that holds a message (what a read returns, to be answered)."""
    return {NAMES.schedules_stream: NAMES.schedule_subject("dep-a"),
            NAMES.runs_stream: NAMES.run_subject("dep-a", run_id),
            NAMES.index_stream: NAMES.index_subject("dep-a"),
            NAMES.leases_stream: NAMES.lease_subject(run_id)}.get(stream, f"{stream}.x")


async def pull_consumers(nc: Client) -> dict[str, str]:
    """stream -> a pull consumer this user made (what MSG.NEXT, INFO, ACK and FC name)."""
    made = {}
    for stream in STREAMS:
        if stream == NAMES.checkpoints_stream:
            continue
        name = f"pull{len(made)}"
        body = {"stream_name": stream, "config": {
            "name": name, "ack_policy": "explicit", "deliver_policy": "all",
            "inactive_threshold": 30_000_000_000}}
        # refused to this user: the requests naming it are refused too
        with contextlib.suppress(nats.errors.Error):
            await nc.request(f"$JS.API.CONSUMER.CREATE.{stream}.{name}",
                             json.dumps(body).encode(), timeout=2)
        made[stream] = name
    made.setdefault(NAMES.checkpoints_stream, "none")
    return made


async def attack(nc: Client, user: str, targets: Targets, run_id: str) -> int:
    """Every allowed request with every target as its reply, then the pushes and pulls
    into the targets; returns how many messages were sent. Ends with a control round (the
    same requests, answered to this client) so the attack's answers were all produced."""
    consumers = await pull_consumers(nc)
    requests = [r for pattern in allowed_publishes(user)
                for r in requests_of(pattern, run_id, consumers)]
    sent = 0
    for subject, body in requests:
        for reply in targets.subjects:
            await nc.publish(subject, body, reply=reply)
            sent += 1
    # consumers that would push every stored message into a target
    for i, (stream, reply) in enumerate((s, r) for s in STREAMS for r in targets.subjects):
        config = {"stream_name": stream, "config": {
            "deliver_subject": reply, "deliver_policy": "all", "ack_policy": "none",
            "name": f"push{i}"}}
        await nc.publish(f"$JS.API.CONSUMER.CREATE.{stream}.push{i}",
                         json.dumps(config).encode())
        sent += 1
    await nc.flush()

    async def control(subject: str, body: bytes) -> None:
        # no answer to this one (an ack, refused, ...): nothing to wait for
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            await nc.request(subject, body, timeout=2)

    await asyncio.gather(*(control(s, b) for s, b in requests))
    return sent


async def stream_states(nc: Client) -> dict[str, tuple[int, int]]:
    js = nc.jetstream(timeout=2.0)
    states = {}
    for stream in STREAMS:
        try:
            info = await js.stream_info(stream)
        except nats.errors.Error:
            states[stream] = (0, 0)
            continue
        states[stream] = (info.state.messages, info.state.last_seq)
    return states


async def subject_last(nc: Client, subject: str) -> int:
    """The sequence of the last message on ``subject`` (0: none)."""
    stream = next(s for s in STREAMS if s in _streams_of(subject))
    try:
        msg = await nc.jetstream(timeout=2.0).get_last_msg(stream, subject)
    except nats.errors.Error:
        return 0
    return int(msg.seq or 0)


def _streams_of(subject: str) -> tuple[str, ...]:
    if subject.startswith(f"$KV.{NAMES.leases_bucket}."):
        return (NAMES.leases_stream,)
    if subject.startswith(f"$KV.{NAMES.replicas_bucket}."):
        return (NAMES.replicas_stream,)
    if subject.startswith("SCHED.runidx."):
        return (NAMES.index_stream,)
    if subject.startswith("SCHED.run."):
        return (NAMES.runs_stream,)
    if subject.startswith("SCHED.sched."):
        return (NAMES.schedules_stream,)
    if subject.startswith("SCHED.checkpoint."):
        return (NAMES.checkpoints_stream,)
    return (NAMES.outages_stream,)


async def populated(server: NatsServer, provider: object) -> str:
    from nats_scheduler.provider import NatsSchedulerProvider

    assert isinstance(provider, NatsSchedulerProvider)
    await provider.apply(schedule("dep-a"))
    fired = await provider.fire_due("dep-a", DUE)
    assert fired is not None
    await provider.enqueue(EnqueueRequest("dep-a", Trigger.RUN_NOW, requested_by="test"))

    async def settled() -> bool:
        runs = await provider.list_runs("dep-a")
        return len(runs) == 2 and all(r.state == RunState.DISPATCHED for r in runs)

    await eventually(settled, timeout=10)
    return fired.run_id


@pytest.mark.parametrize("user", ["auditor", "operator"])
async def test_no_reply_subject_or_consumer_of_theirs_lands_in_the_store(
        tmp_path: Path, user: str) -> None:
    with prod_server(tmp_path / "nats") as server:
        async with scheduler_with_service(server) as (provider, _):
            run_id = await populated(server, provider)
            targets = Targets(run_id, provider.identity)
            watcher, _ = await connect_as(server, "scheduler")
            nc, _ = await connect_as(server, user)
            try:
                before = await stream_states(watcher)
                lasts = {s: await subject_last(watcher, s) for s in targets.subjects
                         if s != targets.replica}
                sent = await attack(nc, user, targets, run_id)
                assert sent > 900  # every allowed request, times every target
                after = await stream_states(watcher)
                for stream in QUIET:
                    assert after[stream] == before[stream], (stream, before, after)
                # a lease expires by its TTL (fewer messages), but nothing is added
                assert after[NAMES.leases_stream][1] == before[NAMES.leases_stream][1]
                # the replicas bucket changes with the provider's beats: the attacked keys
                # hold nothing new, and the provider's own holds its own value
                assert {s: await subject_last(watcher, s) for s in lasts} == lasts
                own = await watcher.jetstream().get_last_msg(NAMES.replicas_stream,
                                                             targets.replica)
                assert json.loads(own.data)["identity"] == provider.identity
            finally:
                await nc.close()
                await watcher.close()

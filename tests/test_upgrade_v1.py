"""A store written by the previous release (schema-1 events, open keys without a TTL, streams
without atomic batches) is read, resumed and upgraded by this one.

The previous release wrote every Run as ``run.created`` (PENDING) then ``run.claimed``; its
open keys had no TTL and were purged when their Run finished; its streams did not allow
atomic batches. None of that may confuse this release.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import msgspec
import nats
import pytest
from nats.js.api import KeyValueConfig, StorageType

from nats_scheduler.clock import SystemClock
from nats_scheduler.core import events, runcore
from nats_scheduler.jetstream.store import Store
from nats_scheduler.names import HDR_EXPECTED_LAST_SUBJECT_SEQUENCE, HDR_MSG_ID, Names, index_msg_id
from nats_scheduler.seam import RunPayload, RunState, Trigger
from tests.harness.history import deployment_run_history
from tests.harness.servers import unique_prefix
from tests.providers import eventually, running, settings

pytestmark = pytest.mark.anyio

OLD = "host-a-4242-1a2b3c"
"""The previous release's process, gone."""


def schema_1(event: events.RunEventType) -> bytes:
    """``event`` as the previous release stored it: schema 1, none of the fields added since."""
    data = json.loads(events.encode(msgspec.structs.replace(event, schema=1)))
    if data["type"] == "run.created":
        del data["holder"]
    del data["run"]["index_seq"]
    return json.dumps(data).encode()


async def test_a_store_of_the_previous_release_is_resumed_read_and_upgraded(
        nats_url: str) -> None:
    prefix = unique_prefix()
    names = Names(prefix)
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    at = SystemClock().now() - timedelta(minutes=1)
    try:
        # The previous release's setup: the same streams without atomic batches, the bucket
        # as nats-py creates it (no atomic batches either).
        for config in Store(nc, settings(nats_url, prefix)).stream_configs():
            await js.add_stream(replace(config, allow_atomic=None))
        await js.create_key_value(KeyValueConfig(bucket=names.leases_bucket, history=1,
                                                 storage=StorageType.FILE))

        async def append(run_id: str, event: events.RunEventType) -> None:
            subject = names.run_subject("old", run_id)
            try:
                last = (await js.get_last_msg(names.runs_stream, subject)).seq
            except nats.js.errors.NotFoundError:
                last = 0
            await js.publish(subject, schema_1(event),
                             headers={HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: str(last)})

        def created(run_id: str) -> events.RunCreated:
            return runcore.create(run_id=run_id, deployment_id="old", trigger=Trigger.RUN_NOW,
                                  due_at=None, payload=RunPayload("t", "p"), now=at,
                                  actor=OLD)

        for run_id in ("v1open", "v1done"):
            await js.publish(names.index_subject("old"), json.dumps(
                {"run_id": run_id, "created_at": at.isoformat()}).encode(),
                headers={HDR_MSG_ID: index_msg_id(run_id)})
        # An open Run it left claimed: its key (no TTL) held by the process that is gone.
        await js.publish(names.lease_subject("v1open"), json.dumps({
            "run_id": "v1open", "holder": OLD, "expires_at": at.isoformat(),
            "acquired_at": at.isoformat()}).encode(),
            headers={HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: "0"})
        opened = created("v1open")
        await append("v1open", opened)
        await append("v1open", runcore.claim(opened.run, holder=OLD, now=at))
        # A Run it finished: created, claimed, session_started, dispatched.
        done = created("v1done")
        claim = runcore.claim(done.run, holder=OLD, now=at)
        session = runcore.session_started(claim.run, session_id="sess-1", now=at, actor=OLD)
        for event in (done, claim, session,
                      runcore.dispatched(session.run, turn_id="turn-1", now=at, actor=OLD)):
            await append("v1done", event)

        async with running(nats_url, prefix, identity="host-b-77-9f8e7d") as provider:
            async def resumed() -> bool:
                return (await provider.get_run("v1open")).state == RunState.DISPATCHED

            await eventually(resumed, timeout=20)
            finished = await provider.get_run("v1done")
            assert (finished.state, finished.session_id, finished.turn_id) == (
                RunState.DISPATCHED, "sess-1", "turn-1")
            listed = await provider.list_runs("old", limit=10)
            assert {r.run_id for r in listed} == {"v1open", "v1done"}
        # upgraded in place: atomic batches allowed on every stream this release writes
        for stream in (names.schedules_stream, names.runs_stream, names.index_stream,
                       names.leases_stream):
            assert (await js.stream_info(stream)).config.allow_atomic, stream
        # the old Run went on as an old one would have: a takeover of the dead holder's key
        trail = [e for e in await deployment_run_history(js, prefix, "old")
                 if e.event is not None and e.event.run.run_id == "v1open"]
        assert [e.type for e in trail] == ["run.created", "run.claimed", "run.claimed",
                                           "run.session_started", "run.dispatched"]
        assert trail[0].event.schema == 1 and trail[2].event.takeover_from == OLD
    finally:
        await nc.close()

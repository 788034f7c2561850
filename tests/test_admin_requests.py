"""Strict admin requests (issue 41): unknown fields refused by name, every text, number and
instant bounded (core/validation.py), against a real provider and its admin service.

A refusal is ``invalid_request`` naming the field and the bound, in AstraBox's words, and
writes nothing. A decoding error deeper than the request (a stored record that cannot be
read) is not blamed on the request. The clients send only fields the service knows.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from nats.aio.msg import Msg

from nats_scheduler.admin.api import AdminError
from nats_scheduler.admin.client import AdminClient
from nats_scheduler.admin.request_checks import decode_request
from nats_scheduler.core import validation
from nats_scheduler.core.events import ScheduleApplied, ScheduleHeld
from nats_scheduler.seam import EnqueueRequest, Trigger
from tests.harness.servers import connect_fast, unique_prefix
from tests.providers import assert_clean
from tests.test_admin_service import Admin, admin_on, daily, raw
from tests.test_hold_until import cli

pytestmark = pytest.mark.anyio

DEP = "dep"
LONG_ID = "i" * (validation.MAX_ID_LENGTH + 1)
LONG_NOTE = "n" * (validation.MAX_NOTE_CHARS + 1)
LONG_KEY = "k" * (validation.MAX_REQUEST_ID_CHARS + 1)
LONG_FILTER = "f" * (validation.MAX_FILTER_CHARS + 1)
FAR = "9999-12-31T23:59:59Z"
ANCIENT = "0001-01-01T00:00:00Z"
WHO = {"by": "alice", "reason": "why"}


@pytest.fixture
async def admin(nats_url: str) -> AsyncIterator[Admin]:
    async with admin_on(nats_url, unique_prefix()) as ctx:
        await ctx.provider.apply(daily(DEP))
        yield ctx


def valid_bodies(run_id: str) -> dict[str, dict[str, object]]:
    """A body each endpoint accepts (the base the hostile ones change one field of)."""
    return {
        "schedules.list": {},
        "schedules.get": {"deployment_id": DEP},
        "schedules.hold": {"deployment_id": DEP, **WHO},
        "schedules.release": {"deployment_id": DEP, **WHO},
        "schedules.hold_bulk": {"filter": "nothing-matches", **WHO},
        "schedules.release_bulk": {"filter": "nothing-matches", **WHO},
        "schedules.explain": {"deployment_id": DEP},
        "schedules.load": {},
        "runs.list": {"deployment_id": DEP},
        "runs.get": {"run_id": run_id},
        "runs.run_now": {"deployment_id": DEP, **WHO},
        "runs.replay": {"run_id": run_id, **WHO},
        "cluster.status": {},
        "health": {},
    }


async def ask(admin: Admin, endpoint: str, body: dict[str, object]) -> dict[str, object]:
    answer, _ = await raw(admin.nc, admin.prefix, endpoint, json.dumps(body).encode())
    return answer


async def test_every_endpoint_refuses_an_unknown_field_by_name(admin: Admin) -> None:
    """A misspelled ``until`` is refused, never an indefinite hold: nothing is written."""
    run = await admin.client.run_now(DEP, by="alice")
    bodies = valid_bodies(run.run_id)
    assert set(bodies) == set(admin.service.endpoints())  # every endpoint is tried
    for endpoint, body in bodies.items():
        answer = await ask(admin, endpoint, {**body, "untl": "2030-01-01T00:00:00Z"})
        error = answer.get("error")
        assert isinstance(error, dict), (endpoint, answer)
        assert error["code"] == "invalid_request", (endpoint, error)
        assert "field the scheduler does not know: 'untl'" in error["message"], error
        assert endpoint in error["message"]  # and what the endpoint takes
        assert_clean(error["message"])
    huge = "x" * 5000
    answer = await ask(admin, "health", {huge: 1})
    message = answer["error"]["message"]  # type: ignore[index]
    assert len(message) < 200 and "does not know" in message
    assert await schedule_events(admin) == [ScheduleApplied]


async def test_every_bound_is_refused_naming_the_field_and_the_bound(admin: Admin) -> None:
    run = await admin.client.run_now(DEP, by="alice")
    base = valid_bodies(run.run_id)
    now = datetime.now(UTC)
    cases: list[tuple[str, dict[str, object], str]] = [
        ("schedules.list", {"filter": LONG_FILTER}, "filter is longer than 255 characters"),
        ("schedules.list", {"after": LONG_ID}, "after is not usable: an ID must be at most 255"),
        ("schedules.get", {"deployment_id": LONG_ID}, "deployment_id is not usable"),
        ("schedules.hold", {"deployment_id": LONG_ID}, "at most 255 characters"),
        ("schedules.hold", {"by": LONG_NOTE}, "by is longer than 1000 characters"),
        ("schedules.hold", {"reason": LONG_NOTE}, "reason is longer than 1000 characters"),
        ("schedules.hold", {"on_behalf_of": LONG_NOTE},
         "on_behalf_of is longer than 1000 characters"),
        ("schedules.hold", {"until": FAR}, "must be at most 365 days ahead"),
        ("schedules.hold", {"until": (now + timedelta(days=366)).isoformat()},
         "must be at most 365 days ahead"),
        ("schedules.hold", {"until": (now - timedelta(minutes=5)).isoformat()}, "has passed"),
        ("schedules.hold", {"until": "2030-01-01T00:00:00"}, "(until) must say its time zone"),
        ("schedules.hold", {"until": "next tuesday"}, "'until' of the request is not an "
                                                      "instant with its time zone"),
        ("schedules.release", {"until": (now + timedelta(hours=1)).isoformat()},
         "a release takes none"),
        ("schedules.hold_bulk", {"filter": LONG_FILTER}, "filter is longer than 255"),
        ("schedules.hold_bulk", {"until": FAR}, "must be at most 365 days ahead"),
        ("schedules.hold_bulk", {"limit": 1001}, "limit must be between 1 and 1000, not 1001"),
        ("schedules.hold_bulk", {"limit": 0}, "limit must be between 1 and 1000, not 0"),
        ("schedules.hold_bulk", {"after": LONG_ID}, "after is not usable"),
        ("schedules.release_bulk", {"reason": LONG_NOTE}, "reason is longer than 1000"),
        ("schedules.explain", {"deployment_id": LONG_ID}, "deployment_id is not usable"),
        ("schedules.explain", {"since": ANCIENT}, "since must lie within 3653 days before now "
                                                  "and 3653 days after"),
        ("schedules.explain", {"until": FAR}, "until must lie within 3653 days"),
        ("schedules.explain", {"before": FAR}, "before must lie within 3653 days"),
        ("schedules.explain", {"limit": 1001}, "limit must be between 1 and 1000"),
        ("schedules.load", {"hours": 49}, "hours must be between 1 and 48, not 49"),
        ("schedules.load", {"hours": 0}, "hours must be between 1 and 48, not 0"),
        ("runs.list", {"limit": 1001}, "limit must be between 1 and 1000, not 1001"),
        ("runs.list", {"limit": 0}, "limit must be between 1 and 1000, not 0"),
        ("runs.list", {"before": LONG_ID}, "before is not usable"),
        ("runs.list", {"deployment_id": LONG_ID}, "deployment_id is not usable"),
        ("runs.get", {"run_id": LONG_ID}, "run_id is not usable"),
        ("runs.run_now", {"request_id": LONG_KEY}, "request_id is longer than 255 characters"),
        ("runs.run_now", {"request_id": ""}, "request_id must not be empty"),
        ("runs.run_now", {"by": LONG_NOTE}, "by is longer than 1000 characters"),
        ("runs.run_now", {"reason": LONG_NOTE}, "reason is longer than 1000 characters"),
        ("runs.run_now", {"on_behalf_of": LONG_NOTE}, "on_behalf_of is longer than 1000"),
        ("runs.replay", {"request_id": LONG_KEY}, "request_id is longer than 255 characters"),
        ("runs.replay", {"run_id": LONG_ID}, "run_id is not usable"),
        ("runs.replay", {"on_behalf_of": LONG_NOTE}, "on_behalf_of is longer than 1000"),
    ]
    for endpoint, change, words in cases:
        answer = await ask(admin, endpoint, {**base[endpoint], **change})
        error = answer.get("error")
        assert isinstance(error, dict), (endpoint, change, answer)
        assert error["code"] == "invalid_request", (endpoint, change, error)
        assert words in error["message"], (endpoint, error["message"])
        assert_clean(error["message"])
    # at the bound, accepted: nothing above refused a value it should take
    edge = await ask(admin, "schedules.hold", {**base["schedules.hold"],
                                               "until": (now + timedelta(days=364)).isoformat(),
                                               "reason": "r" * validation.MAX_NOTE_CHARS})
    assert "error" not in edge, edge
    assert await schedule_events(admin) == [ScheduleApplied, ScheduleHeld]
    runs = await admin.client.list_runs(DEP, limit=1000)
    assert [r.run_id for r in runs.runs] == [run.run_id]  # no refused Run now was stored


async def test_the_seam_bounds_the_request_id_and_the_notes_of_enqueue(admin: Admin) -> None:
    """``provider.enqueue`` (AstraBox's path, not only the admin service's) refuses an
    idempotency key or a note past its bound, in words naming it."""
    provider = admin.provider
    for request, extra, words in (
            (EnqueueRequest(DEP, Trigger.RUN_NOW, request_id=LONG_KEY), {},
             "request_id is longer than 255 characters"),
            (EnqueueRequest(DEP, Trigger.RUN_NOW, requested_by=LONG_NOTE), {},
             "requested_by is longer than 1000"),
            (EnqueueRequest(DEP, Trigger.RUN_NOW), {"on_behalf_of": LONG_NOTE},
             "on_behalf_of is longer than 1000")):
        with pytest.raises(ValueError, match=words) as refused:
            await provider.enqueue(request, **extra)  # type: ignore[arg-type]
        assert_clean(str(refused.value))
    kept = await provider.enqueue(EnqueueRequest(DEP, Trigger.RUN_NOW,
                                                 request_id="k" * validation.MAX_REQUEST_ID_CHARS))
    assert kept.deployment_id == DEP


async def test_a_stored_record_that_cannot_be_read_is_not_blamed_on_the_request(
        admin: Admin) -> None:
    """A Schedule event that does not decode, read for ``schedules.get``: the request was
    fine, so the answer must not be ``invalid_request`` ("the request is not valid")."""
    names = admin.provider.store.names
    await admin.nc.jetstream().publish(names.schedule_subject("garbled"),
                                       b'{"type": "schedule.applied", "schedule": 5}')
    answer = await ask(admin, "schedules.get", {"deployment_id": "garbled"})
    error = answer["error"]
    assert isinstance(error, dict)
    assert error["code"] != "invalid_request", error
    assert "request" not in error["message"], error
    assert_clean(error["message"])


async def test_the_clients_send_only_fields_the_service_knows(nats_url: str) -> None:
    """Every request the client sends decodes strictly as its endpoint's type, and carries
    only what was set: a newer client asks an older service in words it knows."""
    prefix = unique_prefix()
    async with admin_on(nats_url, prefix) as ctx:
        kinds = {endpoint: kind for endpoint, (kind, _) in ctx.service.endpoints().items()}
    nc = await connect_fast(nats_url)
    sent: list[tuple[str, bytes]] = []

    async def record(msg: Msg) -> None:  # stands in for the service: answers not_found
        sent.append((msg.subject.removeprefix(f"{prefix}.admin."), msg.data))
        await msg.respond(b'{"error": {"code": "not_found", "message": "recorded"}}')

    sub = await nc.subscribe(f"{prefix}.admin.>", cb=record)
    client = AdminClient(nc, prefix, timeout=2.0)
    until = datetime.now(UTC) + timedelta(hours=1)
    calls = [client.list_schedules(), client.get_schedule(DEP), client.list_runs(DEP),
             client.get_run("r"), client.explain(DEP), client.load_ahead(),
             client.cluster_status(), client.health(),
             client.hold(DEP, by="a", reason="r"), client.hold(DEP, by="a", reason="r",
                                                               until=until),
             client.release(DEP, by="a", reason="r"), client.run_now(DEP, by="a"),
             client.replay("r", by="a"), client.hold_bulk("x", by="a", reason="r")]
    try:
        for call in calls:
            with pytest.raises(AdminError):
                await call
    finally:
        await sub.unsubscribe()
        await nc.close()
    assert {endpoint for endpoint, _ in sent} == set(kinds) - {"schedules.release_bulk"}
    for endpoint, data in sent:
        decode_request(kinds[endpoint], data, endpoint)  # strict: no unknown field
    keys = [(endpoint, sorted(json.loads(data))) for endpoint, data in sent]
    assert ("schedules.hold", ["by", "deployment_id", "reason"]) in keys
    assert ("schedules.hold", ["by", "deployment_id", "reason", "until"]) in keys
    assert ("schedules.list", []) in keys and ("cluster.status", []) in keys
    assert ("runs.run_now", ["by", "deployment_id", "request_id"]) in keys
    assert ("schedules.load", []) in keys  # 24 h is the default: not sent


async def schedule_events(admin: Admin) -> list[type]:
    store = admin.provider.store
    subject = store.names.schedule_subject(DEP)
    found, seq = [], 1
    while (msg := await store.next(subject, seq)) is not None:
        from nats_scheduler.core.events import decode_schedule_event
        found.append(type(decode_schedule_event(msg.data)))
        seq = msg.seq + 1
    return found


def test_request_types_refuse_unknown_fields_and_answers_keep_ignoring_them() -> None:
    """Strict requests, lenient answers: an answer from a newer service still decodes."""
    from nats_scheduler.admin import api, request_api

    for name in dir(request_api):
        kind = getattr(request_api, name)
        if isinstance(kind, type) and issubclass(kind, request_api.Request):
            assert kind.__struct_config__.forbid_unknown_fields, name
            assert kind.__struct_config__.omit_defaults, name
    newer = b'{"code": "unavailable", "message": "m", "retry_after": 0.2, "later": 1}'
    assert msgspec.json.decode(newer, type=api.ErrorBody).retry_after == 0.2
    view = b'{"identity": "r", "a_field_of_tomorrow": true}'
    assert msgspec.json.decode(view, type=api.ReplicaView).identity == "r"
    with pytest.raises(AdminError, match="the request is not valid JSON"):
        decode_request(request_api.EmptyRequest, b"{", "health")


async def test_the_command_line_judges_values_starting_with_a_dash_in_its_own_words(
        admin: Admin, capsys: pytest.CaptureFixture[str]) -> None:
    """``--until -5m`` and friends reach the command, which answers in its words with the
    usage exit code (2), never argparse's "expected one argument"; a note starting with
    ``-`` is taken as it is."""
    url = admin.nc.connected_url
    assert url is not None
    server = f"nats://{url.hostname}:{url.port}"
    refused = [
        (("hold", DEP, "--reason", "x", "--until", "-5m"),
         "error: --until -5m is in the past: give a time ahead (+30m, +2h, +1d)"),
        (("hold", DEP, "--reason", "x", "--until=-5m"), "--until -5m is in the past"),
        (("hold", DEP, "--until", "-1d2h", "--reason", "x"), "--until -1d2h is in the past"),
        (("hold", DEP, "--reason", "x", "--until", "+400d"),
         "--until +400d is more than 365 days ahead"),
        (("hold", DEP, "--reason", "x", "--until"), "error: --until needs a value"),
        (("runs", DEP, "--limit", "-1"), "limit must be between 1 and 1000, not -1"),
        (("schedules", "--load", "--hours", "-5"), "covers 1 to 48 hours, not -5"),
        (("explain", DEP, "--since", "-1h"), "error: --since -1h is not an instant in ISO "
                                              "8601"),
        (("runs", DEP, "--limit", "-x"), "error: --limit -x is not a whole number"),
    ]
    for argv, words in refused:
        code, _, err = await cli(server, admin.prefix, capsys, *argv)
        assert code == 2 and words in err, (argv, err)
        assert "expected one argument" not in err
        assert_clean(err.splitlines()[-1].replace("nats-scheduler", "the command"))
    assert await schedule_events(admin) == [ScheduleApplied]
    code, _, err = await cli(server, admin.prefix, capsys, "hold", DEP, "--reason", "-urgent",
                             "--by", "-ops")
    assert code == 0, err
    hold = admin.provider.schedules.get(DEP).hold  # type: ignore[union-attr]
    assert hold is not None and (hold.reason, hold.on_behalf_of) == ("-urgent", "-ops")

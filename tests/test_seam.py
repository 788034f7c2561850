"""The seam's value types and errors: names, immutability, equality, validation, hierarchy."""

from __future__ import annotations

import dataclasses
import gc
from datetime import UTC, datetime, timedelta, timezone

import msgspec
import pytest

from nats_scheduler import seam
from nats_scheduler.seam import (
    EnqueueRequest,
    InvalidSchedule,
    Run,
    RunInvocation,
    RunNotFound,
    RunPayload,
    RunPermanentError,
    RunState,
    Schedule,
    ScheduleCapacityExceeded,
    ScheduleNotFound,
    SchedulerConfigurationError,
    SchedulerError,
    SchedulerProperties,
    SchedulerUnavailable,
    Trigger,
)

T = datetime(2030, 1, 1, tzinfo=UTC)
PAYLOAD = RunPayload("agent:x", "do it")


def run(**changes: object) -> Run:
    fields = dict(run_id="r", deployment_id="d", trigger=Trigger.SCHEDULE, due_at=T,
                  created_at=T, updated_at=T, state=RunState.PENDING, payload=PAYLOAD,
                  session_id=None, turn_id=None, attempts=0, error=None, replay_of=None,
                  requested_by=None)
    fields.update(changes)
    return Run(**fields)  # type: ignore[arg-type]


def test_every_name_of_the_contract_exists() -> None:
    names = ["SEAMS_API_VERSION", "Trigger", "RunState", "RunPayload", "Schedule",
             "RunInvocation", "Run", "EnqueueRequest", "SchedulerProperties", "SchedulerError",
             "SchedulerUnavailable", "InvalidSchedule", "ScheduleCapacityExceeded",
             "SchedulerConfigurationError", "ScheduleNotFound", "RunNotFound",
             "RunPermanentError", "RunHandler", "SchedulerProvider", "RepositoryBackend"]
    for name in names:
        assert hasattr(seam, name), name
    assert seam.SEAMS_API_VERSION == 1


def test_enum_values_are_the_wire_words() -> None:
    assert [t.value for t in Trigger] == ["schedule", "run_now", "replay"]
    assert [s.value for s in RunState] == ["pending", "dispatching", "dispatched", "failed"]


def test_value_types_are_immutable_and_compare_by_value() -> None:
    a = Schedule("d", "n", "* * * * *", "UTC", True, PAYLOAD)
    b = Schedule("d", "n", "* * * * *", "UTC", True, RunPayload("agent:x", "do it"))
    assert a == b and hash(a) == hash(b) and a.version == 0
    assert a != msgspec.structs.replace(a, version=1)
    with pytest.raises(AttributeError):
        a.cron = "0 0 * * *"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        PAYLOAD.prompt = "other"  # type: ignore[misc]
    assert run() == run() and run() != run(attempts=1)
    assert not dataclasses.is_dataclass(a)  # msgspec Structs: encodable as they are
    assert msgspec.json.decode(msgspec.json.encode(run()), type=Run) == run()


def test_schedules_stay_out_of_the_garbage_collector() -> None:
    """AstraBox's reconcile list of a million Schedules is not walked by every full
    collection: a Schedule and its payload are untracked (they can hold no cycle: a payload
    that is not a RunPayload is refused), decoded ones too."""
    a = Schedule("d", "n", "* * * * *", "UTC", True, RunPayload("agent:x", "do it"))
    decoded = msgspec.json.decode(msgspec.json.encode(a), type=Schedule)
    assert decoded == a
    for value in (a, a.payload, decoded, decoded.payload):
        assert not gc.is_tracked(value)


@pytest.mark.parametrize("build", [
    lambda: Schedule("", "n", "* * * * *", "UTC", True, PAYLOAD),
    lambda: Schedule("d", "n", "* * * * *", "UTC", "yes", PAYLOAD),  # type: ignore[arg-type]
    lambda: Schedule("d", "n", "* * * * *", "UTC", True, PAYLOAD, -1),
    lambda: Schedule("d", "n", "* * * * *", "UTC", True, ("t", "p")),  # type: ignore[arg-type]
    lambda: RunPayload("t", None),  # type: ignore[arg-type]
    lambda: run(due_at=datetime(2030, 1, 1)),  # naive
    lambda: run(created_at=datetime(2030, 1, 1, tzinfo=timezone(timedelta(hours=2)))),
    lambda: run(attempts=-1),
    lambda: RunInvocation("r", "d", Trigger.SCHEDULE, T, PAYLOAD, 0, None, None),
    lambda: EnqueueRequest("d", Trigger.SCHEDULE),
    lambda: EnqueueRequest("d", Trigger.REPLAY),
    lambda: EnqueueRequest("d", Trigger.RUN_NOW, replay_of="r"),
    lambda: EnqueueRequest("d", Trigger.RUN_NOW, request_id=""),
    lambda: SchedulerProperties("global", None, 1.0),  # type: ignore[arg-type]
    lambda: SchedulerProperties("cluster", 0, 1.0),
    lambda: SchedulerProperties("cluster", None, -1.0),
])
def test_obviously_wrong_fields_are_rejected(build) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises((ValueError, TypeError)):
        build()


def test_valid_requests_and_properties() -> None:
    assert EnqueueRequest("d", Trigger.REPLAY, replay_of="r").replay_of == "r"
    props = SchedulerProperties("cluster", 10_000, 0.5)
    assert str(props) == (
        "recovery_scope=cluster max_active_schedules=10000 pause_visibility_seconds=0.5")
    assert "unlimited" in str(SchedulerProperties("executor", None, 11))


def test_error_hierarchy() -> None:
    for cls in (SchedulerUnavailable, InvalidSchedule, ScheduleCapacityExceeded,
                SchedulerConfigurationError, ScheduleNotFound, RunNotFound):
        assert issubclass(cls, SchedulerError)
    assert issubclass(InvalidSchedule, ValueError)
    assert issubclass(ScheduleNotFound, LookupError)
    assert issubclass(RunNotFound, LookupError)
    assert not issubclass(RunPermanentError, SchedulerError)  # raised by the handler
    assert issubclass(RunPermanentError, Exception)


def test_provider_class_attributes_and_properties_line() -> None:
    from nats_scheduler import NatsSchedulerProvider

    assert NatsSchedulerProvider.name == "nats"
    assert NatsSchedulerProvider.seams_api_version == seam.SEAMS_API_VERSION
    provider = NatsSchedulerProvider()
    assert provider.properties.recovery_scope == "cluster"
    assert provider.describe().startswith("scheduler provider nats: recovery_scope=cluster")

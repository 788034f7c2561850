"""Provider selection through the entry point, as docs/contract.md ("Packaging") describes it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from nats_scheduler import NatsSchedulerProvider
from nats_scheduler.devhost.host import SqliteBackend
from nats_scheduler.devhost.loader import (
    ENTRY_POINT_GROUP,
    ProviderLoadError,
    load_provider,
)
from nats_scheduler.seam import SchedulerConfigurationError, SchedulerProperties


@dataclass
class FakeEntryPoint:
    name: str
    target: Any

    def load(self) -> Any:
        if isinstance(self.target, Exception):
            raise self.target
        return self.target


class GoodProvider:
    name: ClassVar[str] = "good"
    seams_api_version: ClassVar[int] = 1
    configured_with: Any = None

    @property
    def properties(self) -> SchedulerProperties:
        return SchedulerProperties("executor", 64, 11.0)

    def configure(self, *, repository_backend: Any) -> None:
        GoodProvider.configured_with = repository_backend


class Misnamed(GoodProvider):
    name: ClassVar[str] = "other"


class FromTheFuture(GoodProvider):
    name: ClassVar[str] = "future"
    seams_api_version: ClassVar[int] = 2


class NeedsSql(GoodProvider):
    name: ClassVar[str] = "needs-sql"

    def configure(self, *, repository_backend: Any) -> None:
        raise SchedulerConfigurationError("needs a SQL database (sql_database_url)")


POINTS = [FakeEntryPoint("good", GoodProvider), FakeEntryPoint("misnamed", Misnamed),
          FakeEntryPoint("future", FromTheFuture), FakeEntryPoint("needs-sql", NeedsSql),
          FakeEntryPoint("broken", ImportError("no module named broken_provider"))]


def load(name: str, tmp_path: Path) -> Any:
    return load_provider({"ASTRABOX_SCHEDULER_PROVIDER": name}, SqliteBackend(tmp_path / "a.db"),
                         entry_points=POINTS)


def refusal(name: str, tmp_path: Path) -> str:
    with pytest.raises(ProviderLoadError) as error:
        load(name, tmp_path)
    return str(error.value)


def test_a_registered_provider_is_configured_and_its_properties_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    provider = load("good", tmp_path)
    assert isinstance(provider, GoodProvider)
    assert GoodProvider.configured_with.sql_database_url().startswith("sqlite:///")
    assert ("scheduler provider good: recovery_scope=executor max_active_schedules=64 "
            "pause_visibility_seconds=11") in caplog.text


def test_none_is_reserved_for_no_scheduler(tmp_path: Path) -> None:
    assert load("none", tmp_path) is None


def test_refusals_at_startup_say_what_to_do(tmp_path: Path) -> None:
    unknown = refusal("dbos", tmp_path)
    assert "unknown scheduler provider 'dbos'" in unknown and "good" in unknown
    assert "none" in unknown
    assert "registered by a class named 'other'" in refusal("misnamed", tmp_path)
    future = refusal("future", tmp_path)
    assert "seam version 2" in future and "version 1" in future
    configure = refusal("needs-sql", tmp_path)
    assert "needs a SQL database" in configure
    assert configure.endswith(
        "Choose another provider or set ASTRABOX_SCHEDULER_PROVIDER=none.")
    assert "could not be loaded" in refusal("broken", tmp_path)


def test_the_installed_nats_entry_point_is_this_provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from importlib.metadata import entry_points

    assert {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)} >= {"nats"}
    caplog.set_level(logging.INFO)
    monkeypatch.setenv("ASTRABOX_NATS_URL", "nats://127.0.0.1:1")
    provider = load_provider({}, SqliteBackend(tmp_path / "a.db"))  # unset: the default, nats
    assert isinstance(provider, NatsSchedulerProvider)
    assert "scheduler provider nats: recovery_scope=cluster" in caplog.text
    monkeypatch.delenv("ASTRABOX_NATS_URL")
    monkeypatch.delenv("ASTRABOX_NATS_EMBEDDED", raising=False)
    with pytest.raises(ProviderLoadError) as missing:
        load_provider({"ASTRABOX_SCHEDULER_PROVIDER": "nats"}, SqliteBackend(tmp_path / "a.db"))
    assert "ASTRABOX_NATS_URL" in str(missing.value)
    assert "set ASTRABOX_SCHEDULER_PROVIDER=none" in str(missing.value)

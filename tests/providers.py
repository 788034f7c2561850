"""Helpers to run real provider instances against a real server in tests: in this process
(``running``) or as child processes a test starts and ``reaped`` ends."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from nats_scheduler import NatsSchedulerProvider, NatsSettings
from nats_scheduler.clock import Clock
from nats_scheduler.seam import RunHandler
from nats_scheduler.testing.handler import RecordingRunHandler

ENGINE_WORDS = ("nats", "jetstream", "stream", "consumer", "bucket", "kv", "raft", "$js")
"""Engine words no message the provider raises may contain (docs/contract.md, "Errors")."""

FAST = dict(
    retry_attempts=3,
    retry_initial=0.01,
    retry_cap=0.05,
    call_timeout=1.0,
    lease_seconds=2.0,
    drain_seconds=2.0,
    store_retry_seconds=3.0,
    connect_timeout=3.0,
)
"""Settings that keep retries, timeouts and drains short enough for tests."""


class SqliteBackend:
    """A RepositoryBackend like AstraBox's SQLite one (the nats provider ignores it)."""

    name = "sqlite"

    def __init__(self, path: Path) -> None:
        self._path = path

    def sql_database_url(self) -> str:
        return f"sqlite:///{self._path / 'astrabox.db'}"


class MongoBackend:
    """A RepositoryBackend like AstraBox's MongoDB one: no SQL URL."""

    name = "mongodb"

    def sql_database_url(self) -> str:
        raise NotImplementedError("mongodb has no SQL database")


def settings(url: str, prefix: str, **overrides: object) -> NatsSettings:
    return NatsSettings(url=url, prefix=prefix, **{**FAST, **overrides})  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def running(
    url: str,
    prefix: str,
    handler: RunHandler | None = None,
    *,
    clock: Clock | None = None,
    **overrides: object,
) -> AsyncIterator[NatsSchedulerProvider]:
    """A started provider, always stopped afterwards."""
    provider = NatsSchedulerProvider(settings(url, prefix, **overrides), clock=clock)
    provider.configure(repository_backend=MongoBackend())
    await provider.start(handler or RecordingRunHandler())
    try:
        yield provider
    finally:
        await provider.stop()


@contextlib.contextmanager
def reaped() -> Iterator[list[subprocess.Popen[Any]]]:
    """A list for the child processes a test starts; each still running when the block ends
    (the test failed half-way) is killed by its own PID and reaped: none outlives its test."""
    started: list[subprocess.Popen[Any]] = []
    try:
        yield started
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


def assert_clean(message: str, *, echoed: str = "") -> None:
    """No engine vocabulary, no reprs of client errors (docs/contract.md, "Errors").

    ``echoed`` is an ID the caller passed in: the message must name it, and what the caller
    wrote is not the engine's vocabulary.
    """
    lowered = message.replace(repr(echoed), "").lower() if echoed else message.lower()
    for word in ENGINE_WORDS:
        assert word not in lowered, f"engine word {word!r} in {message!r}"
    assert "Error(" not in message and "Traceback" not in message, message


async def eventually(check, timeout: float = 20.0, interval: float = 0.02):  # type: ignore[no-untyped-def]
    """Poll ``check()`` (sync or async) until it returns a truthy value, or fail at the deadline."""
    import asyncio
    import inspect

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(interval)

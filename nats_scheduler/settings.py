"""Settings of the provider, the command line and the console, read from the environment.

Every field has the name of its environment variable in ``NatsSettings.ENV``; the settings
object in code takes the same names (lower case, without ``ASTRABOX_NATS_``).
docs/configuration.md lists them with their defaults.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from .seam import SchedulerConfigurationError

_PREFIX_RE = re.compile(r"^[A-Za-z0-9_-]{1,32}$")


MAX_AUTO_HOLD_AFTER = 1000
"""The most failures in a row an automatic hold may wait for (each replica keeps that many
failed Runs per failing Schedule)."""

CONNECTION_FIELDS = ("url", "creds", "user", "password", "tls_ca", "tls_cert", "tls_key",
                     "prefix")
"""The settings every client (provider, CLI, console) takes as flags, in flag order."""


def connection_flags_env() -> dict[str, str]:
    """Connection setting name -> its environment variable (the flag is ``--name``)."""
    return {name: NatsSettings.ENV[name] for name in CONNECTION_FIELDS}


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class NatsSettings:
    """Connection, naming and timing settings of the ``nats`` scheduler provider."""

    url: str = ""
    creds: str | None = None
    user: str | None = None
    password: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    prefix: str = "SCHED"
    replicas: int = 1
    embedded: bool = False
    store_dir: str = ".nats-data"
    # Timing (seconds). Defaults follow the issues: 8 attempts, 1 s initial, 60 s cap.
    retry_attempts: int = 8
    retry_initial: float = 1.0
    retry_cap: float = 60.0
    retry_total: float | None = None
    call_timeout: float = 30.0
    lease_seconds: float = 5.0
    drain_seconds: float = 10.0
    store_retry_seconds: float = 12.0
    connect_timeout: float = 5.0
    max_concurrent_dispatch: int = 64
    # What one replica was measured to hold within its budgets (bench/scale.py and
    # bench/held.py at a million: restart, first load, memory; docs/configuration.md).
    max_active_schedules: int = 1_000_000
    # History: a Run is kept while it is among the newest ``retention_runs`` of its deployment
    # and younger than ``retention_days``; unfinished Runs are always kept (docs/configuration.md).
    retention_days: float = 90.0
    retention_runs: int = 10_000
    retention_interval: float = 600.0
    identity: str | None = None
    admin_service: bool = True
    """Serve the operators' admin service (console and CLI actions) from this process."""
    service_user: str | None = None
    service_password: str | None = None
    service_creds: str | None = None
    """The admin service's own login, in an account of its own that operators reach through a
    service import (``nats-server.conf``: user ``service``): then the server proves who sent
    each action and the events record that user. Without one the service shares the
    provider's connection and records the name the client gives."""
    server_sync_always: bool = False
    """The server syncs every write to disk before acknowledging it (``sync_interval:
    always``, as the shipped nats-server.conf): then writes made together leave as atomic
    batches from 16 messages on instead of 64 (jetstream/acks.py). ``doctor`` says when this
    disagrees with what the server's monitoring endpoint reports."""
    auto_hold_after_failures: int = 0
    """Hold a Schedule after this many of its scheduled Runs in a row end FAILED (0: never;
    docs/operations.md, "Holds that end, and holds the scheduler sets")."""
    extra: Mapping[str, str] = field(default_factory=dict)

    ENV = {
        "url": "ASTRABOX_NATS_URL",
        "creds": "ASTRABOX_NATS_CREDS",
        "user": "ASTRABOX_NATS_USER",
        "password": "ASTRABOX_NATS_PASSWORD",
        "tls_ca": "ASTRABOX_NATS_TLS_CA",
        "tls_cert": "ASTRABOX_NATS_TLS_CERT",
        "tls_key": "ASTRABOX_NATS_TLS_KEY",
        "prefix": "ASTRABOX_NATS_PREFIX",
        "replicas": "ASTRABOX_NATS_REPLICAS",
        "embedded": "ASTRABOX_NATS_EMBEDDED",
        "store_dir": "ASTRABOX_NATS_STORE_DIR",
        "retry_attempts": "ASTRABOX_NATS_RETRY_ATTEMPTS",
        "retry_initial": "ASTRABOX_NATS_RETRY_INITIAL_SECONDS",
        "retry_cap": "ASTRABOX_NATS_RETRY_CAP_SECONDS",
        "retry_total": "ASTRABOX_NATS_RETRY_TOTAL_SECONDS",
        "call_timeout": "ASTRABOX_NATS_CALL_TIMEOUT_SECONDS",
        "lease_seconds": "ASTRABOX_NATS_LEASE_SECONDS",
        "drain_seconds": "ASTRABOX_NATS_DRAIN_SECONDS",
        "store_retry_seconds": "ASTRABOX_NATS_STORE_RETRY_SECONDS",
        "connect_timeout": "ASTRABOX_NATS_CONNECT_TIMEOUT_SECONDS",
        "max_concurrent_dispatch": "ASTRABOX_NATS_MAX_CONCURRENT_DISPATCH",
        "max_active_schedules": "ASTRABOX_NATS_MAX_ACTIVE_SCHEDULES",
        "retention_days": "ASTRABOX_NATS_RETENTION_DAYS",
        "retention_runs": "ASTRABOX_NATS_RETENTION_RUNS",
        "retention_interval": "ASTRABOX_NATS_RETENTION_INTERVAL_SECONDS",
        "identity": "ASTRABOX_NATS_IDENTITY",
        "admin_service": "ASTRABOX_NATS_ADMIN_SERVICE",
        "service_user": "ASTRABOX_NATS_SERVICE_USER",
        "service_password": "ASTRABOX_NATS_SERVICE_PASSWORD",
        "service_creds": "ASTRABOX_NATS_SERVICE_CREDS",
        "server_sync_always": "ASTRABOX_NATS_SERVER_SYNC_ALWAYS",
        "auto_hold_after_failures": "ASTRABOX_NATS_AUTO_HOLD_AFTER_FAILURES",
    }

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> NatsSettings:
        """Read every ``ASTRABOX_NATS_*`` variable; unset ones keep their defaults."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        types = {f.name: f.type for f in fields(cls)}
        for name, var in cls.ENV.items():
            raw = env.get(var)
            if raw is None or raw == "":
                continue
            kind = str(types[name])
            try:
                if kind.startswith("bool"):
                    values[name] = _flag(raw)
                elif kind.startswith("int"):
                    values[name] = int(raw)
                elif kind.startswith("float"):
                    values[name] = float(raw)
                else:
                    values[name] = raw
            except ValueError as exc:
                raise SchedulerConfigurationError(
                    f"setting {var} must be a number, got {raw!r}"
                ) from exc
        return cls(**values)  # type: ignore[arg-type]

    def validated(self) -> NatsSettings:
        """Check the settings without I/O; raise SchedulerConfigurationError naming the bad one."""
        env = self.ENV
        if not self.url and not self.embedded:
            raise SchedulerConfigurationError(
                f"the nats scheduler needs {env['url']} (the server URLs) "
                f"or {env['embedded']}=1 for a private development server"
            )
        if not _PREFIX_RE.match(self.prefix):
            raise SchedulerConfigurationError(
                f"{env['prefix']} must be 1-32 letters, digits, '_' or '-', got {self.prefix!r}"
            )
        if self.replicas not in (1, 3, 5):
            raise SchedulerConfigurationError(f"{env['replicas']} must be 1, 3 or 5")
        if (self.user is None) != (self.password is None):
            raise SchedulerConfigurationError(
                f"{env['user']} and {env['password']} must be set together"
            )
        if (self.service_user is None) != (self.service_password is None):
            raise SchedulerConfigurationError(
                f"{env['service_user']} and {env['service_password']} must be set together"
            )
        if (self.tls_cert is None) != (self.tls_key is None):
            raise SchedulerConfigurationError(
                f"{env['tls_cert']} and {env['tls_key']} must be set together"
            )
        for name in ("creds", "service_creds", "tls_ca", "tls_cert", "tls_key"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise SchedulerConfigurationError(f"{env[name]} names a file that does not exist")
        positive = ("retry_initial", "retry_cap", "call_timeout", "lease_seconds",
                    "drain_seconds", "store_retry_seconds", "connect_timeout")
        for name in positive:
            if getattr(self, name) <= 0:
                raise SchedulerConfigurationError(f"{env[name]} must be greater than 0")
        if self.retry_attempts < 1:
            raise SchedulerConfigurationError(f"{env['retry_attempts']} must be at least 1")
        if self.max_concurrent_dispatch < 1 or self.max_active_schedules < 1:
            raise SchedulerConfigurationError("dispatch concurrency and capacity must be >= 1")
        if self.retention_days <= 0 or self.retention_interval <= 0:
            raise SchedulerConfigurationError(
                f"{env['retention_days']} and {env['retention_interval']} must be greater than 0")
        if self.retention_runs < 1:
            raise SchedulerConfigurationError(f"{env['retention_runs']} must be at least 1")
        if not 0 <= self.auto_hold_after_failures <= MAX_AUTO_HOLD_AFTER:
            raise SchedulerConfigurationError(
                f"{env['auto_hold_after_failures']} must be from 0 (off) to "
                f"{MAX_AUTO_HOLD_AFTER}")
        return self

    @property
    def servers(self) -> list[str]:
        """The server URLs, split on commas."""
        return [u.strip() for u in self.url.split(",") if u.strip()]

    def service_login(self) -> NatsSettings | None:
        """The settings of the admin service's own connection, or None when it has no login
        of its own (it then serves on the provider's connection)."""
        if self.service_user is None and self.service_creds is None:
            return None
        return replace(self, user=self.service_user, password=self.service_password,
                       creds=self.service_creds)

    def with_(self, **changes: object) -> NatsSettings:
        """A copy with some fields changed."""
        return replace(self, **changes)  # type: ignore[arg-type]

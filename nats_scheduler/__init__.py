"""AstraBox scheduler provider ``nats``: scheduled Deployments with all state in JetStream.

``NatsSchedulerProvider`` is registered under the ``astrabox.providers.scheduler`` entry
point as ``nats``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Clock", "ManualClock", "NatsSchedulerProvider", "NatsSettings", "SystemClock"]

if TYPE_CHECKING:
    from .clock import Clock, ManualClock, SystemClock
    from .provider import NatsSchedulerProvider
    from .settings import NatsSettings


def __getattr__(name: str) -> Any:
    """Import lazily: ``nats_scheduler.seam`` (and the provider-neutral contract suite) must
    be importable without pulling in nats-py and the provider."""
    if name == "NatsSchedulerProvider":
        from .provider import NatsSchedulerProvider

        return NatsSchedulerProvider
    if name == "NatsSettings":
        from .settings import NatsSettings

        return NatsSettings
    if name in ("Clock", "ManualClock", "SystemClock"):
        from . import clock

        return getattr(clock, name)
    raise AttributeError(f"module 'nats_scheduler' has no attribute {name!r}")

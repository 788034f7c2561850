"""AstraBox scheduler provider ``nats``: scheduled Deployments with all state in JetStream.

``NatsSchedulerProvider`` is registered under the ``astrabox.providers.scheduler`` entry
point as ``nats``.
"""

from __future__ import annotations

from .clock import Clock, ManualClock, SystemClock
from .provider import NatsSchedulerProvider
from .settings import NatsSettings

__all__ = ["Clock", "ManualClock", "NatsSchedulerProvider", "NatsSettings", "SystemClock"]

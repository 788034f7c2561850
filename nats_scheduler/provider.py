"""Placeholder; replaced by the provider core."""

from __future__ import annotations

from typing import ClassVar

from .seam import SEAMS_API_VERSION


class NatsSchedulerProvider:
    name: ClassVar[str] = "nats"
    seams_api_version: ClassVar[int] = SEAMS_API_VERSION

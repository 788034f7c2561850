"""Which release of the provider is installed (the distribution's version)."""

from __future__ import annotations

from importlib import metadata

DISTRIBUTION = "astrabox-scheduler-nats"


def installed_version() -> str:
    """The installed distribution's version; ``0.0.0`` when run from a source tree."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0.0.0"

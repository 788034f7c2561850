"""Load the scheduler provider the way AstraBox does (docs/contract.md, "Packaging").

``ASTRABOX_SCHEDULER_PROVIDER`` names an entry point of the ``astrabox.providers.scheduler``
group; ``none`` is reserved for running without scheduled Deployments. Refused at startup,
with a message for the operator: an unknown name, a class whose ``name`` differs from its
entry-point name, a declared ``seams_api_version`` other than this host's, and a provider
whose ``configure`` raises ``SchedulerConfigurationError`` ("choose another provider or set
ASTRABOX_SCHEDULER_PROVIDER=none"). The dev host defaults to ``nats`` when the variable is
unset (AstraBox's own default, ``dbos``, does not exist here).
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from ..seam import SEAMS_API_VERSION, RepositoryBackend, SchedulerConfigurationError

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "astrabox.providers.scheduler"
ENV_VAR = "ASTRABOX_SCHEDULER_PROVIDER"
NONE = "none"
DEFAULT = "nats"


class ProviderLoadError(Exception):
    """The selected provider cannot be used; the message tells the operator what to do."""


class EntryPointLike(Protocol):
    name: str

    def load(self) -> Any: ...


def selected_name(environ: Mapping[str, str]) -> str:
    return (environ.get(ENV_VAR) or DEFAULT).strip()


def _entry_points() -> list[EntryPointLike]:
    return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def provider_class(name: str, entry_points: Iterable[EntryPointLike] | None = None) -> type:
    """The provider class registered as ``name``, checked against this host."""
    points = list(entry_points) if entry_points is not None else _entry_points()
    found = [ep for ep in points if ep.name == name]
    if not found:
        known = ", ".join(sorted({ep.name for ep in points} | {NONE}))
        raise ProviderLoadError(
            f"unknown scheduler provider {name!r} in {ENV_VAR}; installed: {known}")
    try:
        cls = found[0].load()
    except Exception as exc:
        raise ProviderLoadError(
            f"scheduler provider {name!r} could not be loaded: {exc}") from exc
    declared_name = getattr(cls, "name", None)
    if declared_name != name:
        raise ProviderLoadError(
            f"scheduler provider {name!r} is registered by a class named {declared_name!r}; "
            "a provider's name must equal its entry-point name")
    declared = getattr(cls, "seams_api_version", None)
    if declared is not None and declared != SEAMS_API_VERSION:
        raise ProviderLoadError(
            f"scheduler provider {name!r} was built for scheduler seam version {declared}, "
            f"this host speaks version {SEAMS_API_VERSION}; install a matching release")
    return cls  # type: ignore[no-any-return]


def load_provider(
    environ: Mapping[str, str],
    backend: RepositoryBackend,
    *,
    entry_points: Iterable[EntryPointLike] | None = None,
) -> Any | None:
    """Instantiate and configure the selected provider; None for ``none``."""
    name = selected_name(environ)
    if name == NONE:
        log.info("%s=none: running without scheduled Deployments", ENV_VAR)
        return None
    cls = provider_class(name, entry_points)
    provider = cls()
    try:
        provider.configure(repository_backend=backend)
    except SchedulerConfigurationError as exc:
        raise ProviderLoadError(
            f"scheduler provider {name!r} cannot run in this deployment: {exc}. "
            f"Choose another provider or set {ENV_VAR}={NONE}.") from exc
    log.info("%s", describe(provider))
    return provider


def describe(provider: Any) -> str:
    """The startup line with the provider's declared properties."""
    props = provider.properties
    return (f"scheduler provider {provider.name}: recovery_scope={props.recovery_scope} "
            f"max_active_schedules={props.max_active_schedules} "
            f"pause_visibility_seconds={props.pause_visibility_seconds:g}")

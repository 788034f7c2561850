"""Preparing the store: the event logs and the lease bucket, created, upgraded and checked.

Apart from the :class:`~.store.Store` because it runs once, at ``start()``, and because the
operator tools judge an existing store by the same rules without starting a provider
(``admin/doctor.py``: :func:`incompatibilities` against :func:`stream_configs`).

Creation is idempotent and race-safe: several replicas starting at once may each try to
create a stream, and the loser reads what the winner made. An existing stream is used as it
is unless it would break the provider's guarantees (:func:`incompatibilities`), then
``start()`` refuses it and says why. Two things are changed in place, both additive: the
history index follows the retention settings (its limits ARE the retention), and a stream
made by an older release is allowed atomic batches when the permissions let the scheduler
change it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace

import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import (
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    StreamInfo,
)
from nats.js.kv import KeyValue

from ..names import Names
from ..seam import SchedulerConfigurationError
from ..settings import NatsSettings
from .retry import Retrier

log = logging.getLogger(__name__)

UPGRADE_TIMEOUT = 1.0
"""Seconds ``start()`` waits for the upgrade of a stream made by an older release."""


def stream_configs(names: Names, settings: NatsSettings) -> list[StreamConfig]:
    """The three event logs as the provider wants them: Schedules, Runs, history index."""
    common = dict(
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        num_replicas=settings.replicas,
        discard=DiscardPolicy.OLD,
        max_msgs_per_subject=-1,
        allow_direct=True,
        deny_delete=True,
        duplicate_window=120.0,
        allow_atomic=True,
    )
    retention_age = settings.retention_days * 86400.0
    return [
        StreamConfig(
            name=names.schedules_stream,
            subjects=[names.schedules_filter],
            description="AstraBox scheduler: Schedule events (applied/deleted/held/released)",
            **common,  # type: ignore[arg-type]
        ),
        StreamConfig(
            name=names.runs_stream,
            subjects=[names.runs_filter],
            description="AstraBox scheduler: Run events (created ... dispatched/failed)",
            **common,  # type: ignore[arg-type]
        ),
        StreamConfig(
            name=names.index_stream,
            subjects=[names.index_filter],
            description="AstraBox scheduler: history index, one entry per Run, newest kept",
            **{**common, "max_msgs_per_subject": settings.retention_runs,  # type: ignore[arg-type]
               "max_age": retention_age,
               "duplicate_window": min(120.0, retention_age)},
        ),
    ]


def leases_stream_config(names: Names, settings: NatsSettings) -> StreamConfig:
    """The lease bucket's stream: what ``create_key_value`` makes, plus atomic batches."""
    return StreamConfig(
        name=names.leases_stream,
        description="AstraBox scheduler: one key per unfinished Run, holding its lease",
        subjects=[names.leases_filter], allow_rollup_hdrs=True, allow_msg_ttl=True,
        deny_delete=True, discard=DiscardPolicy.NEW, duplicate_window=120.0,
        max_consumers=-1, max_msgs=-1, max_msgs_per_subject=1,
        num_replicas=settings.replicas, storage=StorageType.FILE, allow_atomic=True,
    )


CHECKPOINT_MAX_AGE = 7 * 86400.0
"""Seconds a checkpoint of the Schedule table is kept (a writer rewrites one before half of
this has passed); what a writer that died half-way left behind goes with it."""

CHECKPOINTS_SETUP_TIMEOUT = 2.0
"""Seconds ``start()`` gives the checkpoints stream: a store whose permissions predate it
(a request refused times out) starts without checkpoints, not late."""


def checkpoints_stream_config(names: Names, settings: NatsSettings) -> StreamConfig:
    """The Schedule table's checkpoints (``jetstream/checkpoints.py``): a cache, so no
    atomic batches, no direct gets (read from the leader), purged by the writer."""
    return StreamConfig(
        name=names.checkpoints_stream,
        subjects=[names.checkpoints_filter],
        description="AstraBox scheduler: checkpoints of the Schedule table (a cache)",
        retention=RetentionPolicy.LIMITS, storage=StorageType.FILE,
        num_replicas=settings.replicas, discard=DiscardPolicy.OLD,
        max_age=CHECKPOINT_MAX_AGE, deny_delete=True, duplicate_window=120.0,
    )


async def ensure_checkpoints(js: JetStreamContext, names: Names,
                             settings: NatsSettings) -> bool:
    """Create or find the checkpoints stream; False (and a warning) when the store does
    not let the scheduler have it: the provider then starts by replaying every Schedule,
    as before checkpoints existed."""
    wanted = checkpoints_stream_config(names, settings)
    try:
        async with asyncio.timeout(CHECKPOINTS_SETUP_TIMEOUT):
            try:
                await js.stream_info(names.checkpoints_stream)
            except nats.js.errors.NotFoundError:
                with contextlib.suppress(nats.js.errors.BadRequestError):  # a race: found
                    await js.add_stream(wanted)
    except Exception as exc:
        log.warning("the store has no checkpoints of the Schedule table for this scheduler "
                    "(%s); replicas start by reading every Schedule (allow the scheduler "
                    "the stream %s, see docs/configuration.md)", str(exc) or type(exc).__name__,
                    names.checkpoints_stream)
        return False
    return True


async def ensure(js: JetStreamContext, names: Names, settings: NatsSettings,
                 retry: Retrier) -> KeyValue:
    """Create or verify the streams and the lease bucket (idempotent, race-safe); returns
    the lease bucket. Each step is retried as any store operation is (a leader election)."""
    for config in stream_configs(names, settings):
        await retry.retrying(
            f"could not prepare {config.name}",
            lambda c=config: _ensure_stream(js, names, c))
    return await retry.retrying("could not prepare the lease table",
                                lambda: _ensure_kv(js, names, settings))


async def _ensure_stream(js: JetStreamContext, names: Names, wanted: StreamConfig) -> None:
    assert wanted.name is not None
    try:
        info = await js.stream_info(wanted.name)
    except nats.js.errors.NotFoundError:
        try:
            await js.add_stream(wanted)
            return
        except nats.js.errors.BadRequestError:
            info = await js.stream_info(wanted.name)  # another replica won the race
    if wanted.name == names.index_stream and limits_differ(wanted, info.config):
        # The retention settings changed: the index follows them (its limits ARE the
        # retention; the Run events are purged to match by the provider).
        info = await js.update_stream(wanted)
    if not info.config.allow_atomic:
        info = await _allow_atomic(js, info.config) or info
    problems = incompatibilities(wanted, info.config)
    if problems:
        raise SchedulerConfigurationError(
            f"the scheduler store already holds the event log {wanted.name}, set up in a "
            f"way the scheduler cannot use: {'; '.join(problems)}"
        )


async def _allow_atomic(js: JetStreamContext, config: StreamConfig) -> StreamInfo | None:
    """Upgrade a stream set up by an older release in place: atomic batches allowed.

    Additive: nothing stored changes, and an older release goes on publishing one message
    at a time. Asked once, briefly: the shipped permissions let the scheduler create
    streams but not change them, so on such a store the request goes unanswered. Then the
    store is written one message at a time (:meth:`AckedPublisher.publish_batched` notices
    the refusal), and says how to upgrade it."""
    try:
        return await asyncio.wait_for(
            js.update_stream(replace(config, allow_atomic=True)), UPGRADE_TIMEOUT)
    except Exception as exc:
        log.warning("the event log %s predates atomic batches and could not be upgraded "
                    "(%s): it is written one message at a time, which is slower; an "
                    "administrator can turn its setting allow_atomic on",
                    config.name, exc)
        return None


async def _ensure_kv(js: JetStreamContext, names: Names, settings: NatsSettings) -> KeyValue:
    bucket = names.leases_bucket
    try:
        kv = await js.key_value(bucket)
    except nats.js.errors.BucketNotFoundError:
        with contextlib.suppress(nats.js.errors.BadRequestError):  # another replica won
            await js.add_stream(leases_stream_config(names, settings))
        kv = await js.key_value(bucket)
    # Open keys expire by their own TTL (jetstream/leases.py) and are opened in atomic
    # batches: a bucket made by an older release is upgraded in place when allowed.
    info = await js.stream_info(names.leases_stream)
    if not info.config.allow_msg_ttl:
        raise SchedulerConfigurationError(
            f"the scheduler store already holds the lease table {bucket}, set up in a way "
            "the scheduler cannot use: its entries cannot expire by themselves")
    if not info.config.allow_atomic:
        await _allow_atomic(js, info.config)
    return kv


def limits_differ(wanted: StreamConfig, actual: StreamConfig) -> bool:
    """Whether a stream's count and age limits differ from the wanted ones."""
    return (actual.max_msgs_per_subject, actual.max_age) != (
        wanted.max_msgs_per_subject, wanted.max_age)


def incompatibilities(wanted: StreamConfig, actual: StreamConfig) -> list[str]:
    """What in an existing event log's configuration would break the provider's guarantees.

    Phrased for the operator who must fix it, without the engine's vocabulary (docs/contract.md).
    """
    problems: list[str] = []
    missing = set(wanted.subjects or []) - set(actual.subjects or [])
    if missing:
        problems.append(f"it does not accept the event names {sorted(missing)}")
    if actual.retention not in (None, RetentionPolicy.LIMITS):
        problems.append("it deletes events once they are read, but events are the history")
    per_subject = actual.max_msgs_per_subject
    if per_subject not in (None, -1, wanted.max_msgs_per_subject):
        problems.append(f"it keeps only {per_subject} events per Run or Schedule, not all of them")
    if actual.discard not in (None, DiscardPolicy.OLD):
        problems.append("it refuses new events when full instead of ageing out old ones")
    if actual.storage not in (None, StorageType.FILE):
        problems.append("it keeps events in memory only, so Run IDs would not be durable")
    return problems

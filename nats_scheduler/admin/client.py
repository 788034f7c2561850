"""``AdminClient``: the :class:`~.api.AdminBackend` the command line and the console use.

Requests go to the admin service (any provider process answers). When none answers (no
process runs, or none within the timeout), read-only queries are answered from the store
directly by :class:`~.reader.StoreReader`, and actions fail with ``unavailable``: an action
must go through a provider so that it is validated and recorded like any other. When the
replicas bucket shows live replicas that all say they do not serve the admin service (the
server refuses them it, say), the action says so and why (``admin/serving.py``) instead of
"no scheduler process is running".
``last_source`` says which of the two answered the latest read ("service" or "store").

The event feed (``events``, ``recent_events``) is ``jetstream/event_feed.py``'s
:class:`EventFeed`, read from the streams directly; ``event_type`` is importable from here too.

Run now and Replay carry an idempotency key (a fresh one unless the caller passes one), so a
request repeated after a lost answer creates one Run, not two.

A busy answer (``unavailable`` with ``retry_after``: the endpoint was at its limit and did
nothing) is asked again up to :data:`BUSY_RETRIES` times, after ``retry_after`` and then
twice that, a little jittered, within the request's own timeout; then its message is the
error. Requests carry only the fields set (the request types omit defaults).
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import TypeVar

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from ..clock import Clock
from ..core.events import AnyEvent
from ..jetstream.event_feed import EventFeed, event_type, type_matches
from ..jetstream.permissions import Probe, ViolationLog
from ..names import HDR_SERVICE_ERROR, HDR_SERVICE_ERROR_CODE, HDR_STATUS, Names
from . import api
from .account_reads import AccountReader
from .health import HealthPolicy
from .load import MAX_HOURS, LoadCounter
from .reader import StoreReader, checked, guarded
from .serving import none_serves

__all__ = ["BULK_PAGE", "AdminClient", "EventFeed", "event_type", "merge_bulk", "type_matches"]

log = logging.getLogger(__name__)

A = TypeVar("A")

BULK_PAGE = 200
"""Schedules per page of a bulk action: each page answers well within the request timeout,
and stopping between two pages leaves at most one page done after the operator stopped."""

BUSY_RETRIES = 2
"""How many times a busy answer is asked again (docs/operations.md, "Under load")."""

_encoder = msgspec.json.Encoder()


class _NoService(Exception):
    """No admin service answered (nobody listens, or no answer in time)."""


class AdminClient:
    """The admin API over a NATS connection the caller owns (and closes)."""

    def __init__(
        self,
        nc: Client,
        prefix: str = "SCHED",
        *,
        timeout: float = 5.0,
        lease_seconds: float = 5.0,
        clock: Clock | None = None,
        violations: ViolationLog | None = None,
    ) -> None:
        self.nc = nc
        self.names = Names(prefix)
        self.timeout = timeout
        self.reader = StoreReader(nc, prefix, timeout=timeout,
                                  policy=HealthPolicy(lease_seconds=lease_seconds), clock=clock)
        self.last_source: str | None = None
        # The server refuses a request outside the user's permissions with an -ERR on the
        # connection, and the request just times out: this log (fed by the connection's
        # error_cb) tells the two apart. Without one, a refusal reads as "no answer".
        self._violations = violations or ViolationLog()

    # ------------------------------------------------------------------ plumbing

    async def _call(self, endpoint: str, request: msgspec.Struct | None, answer: type[A],
                    *, timeout: float | None = None) -> A:
        """One request, asked again after a busy answer while its timeout allows."""
        body = _encoder.encode(request) if request is not None else b"{}"
        loop = asyncio.get_running_loop()
        total = timeout or self.timeout
        deadline = loop.time() + total
        retries = 0
        while True:
            try:
                return await self._once(endpoint, body, answer, deadline - loop.time(), total)
            except api.AdminError as exc:
                if exc.retry_after is None or retries == BUSY_RETRIES:
                    raise
                retries += 1
                pause = exc.retry_after * retries * random.uniform(0.75, 1.25)
                if loop.time() + pause + exc.retry_after > deadline:
                    raise  # no time left to wait for an answer after the pause
                await asyncio.sleep(pause)

    async def _once(self, endpoint: str, body: bytes, answer: type[A], wait: float,
                    total: float) -> A:
        subject = self.names.admin_subject(endpoint)
        mark = self._violations.mark()
        try:
            msg = await self.nc.request(subject, body, timeout=wait)
        except nats.errors.NoRespondersError as exc:
            raise _NoService("no scheduler process is running") from exc
        except nats.errors.TimeoutError as exc:
            if self._violations.refused_since(mark, "publish", subject):
                raise api.AdminError(api.ErrorCode.FORBIDDEN,
                                 f"the connected user may not send this request ({endpoint})"
                                 ) from exc
            raise _NoService(f"no scheduler process answered within {total:g} s") from exc
        except (nats.errors.Error, OSError) as exc:
            raise api.AdminError(api.ErrorCode.UNAVAILABLE,
                             "the connection to the scheduler's server is not usable") from exc
        return _decode_answer(msg, answer)

    async def _read(self, endpoint: str, request: msgspec.Struct | None, answer: type[A],
                    fallback: Callable[[], Awaitable[A]]) -> A:
        try:
            result = await self._call(endpoint, request, answer)
        except _NoService:
            log.debug("no admin service answered %s; reading the store", endpoint)
            result = await fallback()
            self.last_source = "store"
            return result
        self.last_source = "service"
        return result

    async def _act(self, endpoint: str, request: msgspec.Struct, answer: type[A]) -> A:
        try:
            return await self._call(endpoint, request, answer)
        except _NoService as exc:
            why = await self._none_serves()
            raise api.AdminError(
                api.ErrorCode.UNAVAILABLE,
                f"{why or exc}; actions need a running scheduler process (Runs and history "
                "can still be read)",
            ) from None

    async def _none_serves(self) -> str | None:
        """Why no replica answered, when live replicas all say they do not serve (their
        keys in the replicas bucket); None when none is alive or one may serve."""
        live = await self.reader.live_replicas()
        return none_serves([r.admin_service for r in live or []])

    # ------------------------------------------------------------------ Schedules

    async def list_schedules(self, filter: str | None = None, *,
                             include_deleted: bool = False) -> list[api.ScheduleView]:
        views: list[api.ScheduleView] = []
        async for page in self.schedule_pages(filter, include_deleted=include_deleted):
            views.extend(page)
        return views

    async def schedule_pages(self, filter: str | None = None, *,
                             include_deleted: bool = False
                             ) -> AsyncIterator[list[api.ScheduleView]]:
        """The Schedule list page by page, as the service answers it (each page fits in one
        message); from the store, when no service answers, in one piece."""
        after: str | None = None
        while True:
            request = api.ScheduleListRequest(filter=filter, include_deleted=include_deleted,
                                              after=after)
            listed = await self._read(
                "schedules.list", request, api.ScheduleList,
                lambda: _wrap_list(self.reader.list_schedules(
                    filter, include_deleted=include_deleted)))
            source = self.last_source  # read before yielding: other calls may set it
            yield listed.schedules
            if source == "store" or listed.next_after is None:
                return  # the store answers whole (no service answered)
            after = listed.next_after

    async def get_schedule(self, deployment_id: str) -> api.ScheduleDetail:
        return await self._read("schedules.get", api.ScheduleRef(deployment_id=deployment_id),
                                api.ScheduleDetail, lambda: self.reader.get_schedule(deployment_id))

    async def hold(self, deployment_id: str, *, by: str, reason: str,
                   on_behalf_of: str | None = None, until: datetime | None = None
                   ) -> api.ScheduleView:
        """Hold; ``by`` is this client's name for itself (the service records the user the
        server authenticated instead, when it can), ``on_behalf_of`` whom it acts for,
        ``until`` when the hold lifts itself (None: until released)."""
        return await self._act("schedules.hold", api.OperatorAction(
            deployment_id=deployment_id, by=by, reason=reason, on_behalf_of=on_behalf_of,
            until=until), api.ScheduleView)

    async def release(self, deployment_id: str, *, by: str, reason: str,
                      on_behalf_of: str | None = None) -> api.ScheduleView:
        return await self._act("schedules.release", api.OperatorAction(
            deployment_id=deployment_id, by=by, reason=reason, on_behalf_of=on_behalf_of),
            api.ScheduleView)

    async def hold_bulk(self, filter: str, *, by: str, reason: str,
                        after: str | None = None, limit: int | None = None
                        ) -> api.BulkResult:
        """Hold every Schedule matching ``filter``; with ``after``/``limit``, one page."""
        return await self._bulk("schedules.hold_bulk", filter, by, reason, after, limit)

    async def release_bulk(self, filter: str, *, by: str, reason: str,
                           after: str | None = None, limit: int | None = None
                           ) -> api.BulkResult:
        """Release every Schedule matching ``filter``; with ``after``/``limit``, one page."""
        return await self._bulk("schedules.release_bulk", filter, by, reason, after, limit)

    async def bulk_pages(self, filter: str, *, hold: bool, by: str, reason: str,
                         limit: int = BULK_PAGE, on_behalf_of: str | None = None,
                         until: datetime | None = None) -> AsyncIterator[api.BulkResult]:
        """A bulk hold/release page by page (stop iterating to stop between two pages)."""
        endpoint = "schedules.hold_bulk" if hold else "schedules.release_bulk"
        after: str | None = None
        while True:
            page = await self._act(endpoint, api.BulkAction(
                filter=filter, by=by, reason=reason, after=after, limit=limit,
                on_behalf_of=on_behalf_of, until=until), api.BulkResult)
            yield page
            if page.next_after is None:
                return
            after = page.next_after

    async def _bulk(self, endpoint: str, filter: str, by: str, reason: str,
                    after: str | None, limit: int | None) -> api.BulkResult:
        if after is not None or limit is not None:
            return await self._act(endpoint, api.BulkAction(
                filter=filter, by=by, reason=reason, after=after, limit=limit),
                api.BulkResult)
        pages = [page async for page in self.bulk_pages(
            filter, hold=endpoint.endswith("hold_bulk"), by=by, reason=reason)]
        return merge_bulk(pages)

    # ------------------------------------------------------------------ Runs

    async def list_runs(self, deployment_id: str, *, limit: int = 50,
                        before: str | None = None) -> api.RunList:
        request = api.RunListRequest(deployment_id=deployment_id, limit=limit, before=before)
        return await self._read(
            "runs.list", request, api.RunList,
            lambda: self.reader.list_runs(deployment_id, limit=limit, before=before))

    async def get_run(self, run_id: str) -> api.RunView:
        return await self._read("runs.get", api.RunRef(run_id=run_id), api.RunView,
                                lambda: self.reader.get_run(run_id))

    async def explain(self, deployment_id: str, *, since: datetime | None = None,
                      until: datetime | None = None, before: datetime | None = None,
                      limit: int = 500) -> api.DueAccount:
        """A page of the account of due times: from the admin service, or read from the
        store when none answers (due times since the last process stopped: ``no_process``)."""
        request = api.ExplainRequest(deployment_id=deployment_id, since=since, until=until,
                                     before=before, limit=limit)

        async def from_store() -> api.DueAccount:
            reader = AccountReader(self.reader.store(), timeout=self.timeout)
            return await guarded("the account of due times", lambda: reader.page(
                checked(deployment_id, "deployment ID"), now=self.reader.clock.now(),
                since=since, until=until, before=before, limit=limit))

        return await self._read("schedules.explain", request, api.DueAccount, from_store)

    async def explain_pages(self, deployment_id: str, *, since: datetime | None = None,
                            until: datetime | None = None, limit: int = 500
                            ) -> AsyncIterator[api.DueAccount]:
        """The whole account of ``[since, until]`` page by page, newest first."""
        before: datetime | None = None
        while True:
            page = await self.explain(deployment_id, since=since, until=until, before=before,
                                      limit=limit)
            yield page
            if page.next_before is None:
                return
            before = page.next_before
            since, until = page.since, page.until  # the window the first page settled

    async def run_now(self, deployment_id: str, *, by: str, reason: str | None = None,
                      request_id: str | None = None, on_behalf_of: str | None = None
                      ) -> api.RunView:
        return await self._act("runs.run_now", api.RunNowRequest(
            deployment_id=deployment_id, by=by, reason=reason, on_behalf_of=on_behalf_of,
            request_id=request_id or uuid.uuid4().hex), api.RunView)

    async def replay(self, run_id: str, *, by: str, reason: str | None = None,
                     request_id: str | None = None, on_behalf_of: str | None = None
                     ) -> api.RunView:
        return await self._act("runs.replay", api.ReplayRequest(
            run_id=run_id, by=by, reason=reason, on_behalf_of=on_behalf_of,
            request_id=request_id or uuid.uuid4().hex), api.RunView)

    # ------------------------------------------------------------------ cluster

    async def cluster_status(self) -> api.ClusterStatus:
        return await self._read("cluster.status", None, api.ClusterStatus,
                                lambda: self.reader.cluster_status(replica_timeout=0.3))

    async def load_ahead(self, hours: int = 24) -> api.LoadAhead:
        """Scheduled Runs due per minute over the next ``hours``; from the store when no
        process answers (then no minute is called a herd: no live replica to compare)."""
        if not 1 <= hours <= MAX_HOURS:
            raise api.AdminError(api.ErrorCode.INVALID_REQUEST,
                                 f"the load ahead covers 1 to {MAX_HOURS} hours, not {hours}")

        async def from_store() -> api.LoadAhead:
            records = (await self.reader.schedule_table()).live()
            return LoadCounter().count(records, self.reader.clock.now(), hours, replicas=None)

        return await self._read("schedules.load", api.LoadRequest(hours=hours), api.LoadAhead,
                                from_store)

    async def health(self) -> api.Health:
        return await self._read("health", None, api.Health, self.reader.health)

    async def can_act(self) -> tuple[bool, str | None]:
        """Whether this user may request actions, and a running process would take them.

        First the permission, exactly (the server reports a refused publish before the PONG
        of a following PING); then an empty request to an action endpoint, which validation
        refuses without any effect: an ``invalid_request`` answer proves a process listens.
        """
        subject = self.names.admin_subject("schedules.hold")
        try:
            permitted = await self._violations.allowed(
                self.nc, Probe("request actions", subject, mutating=True),
                timeout=min(self.timeout, 2.0))
        except (nats.errors.Error, OSError, TimeoutError):
            return False, "the connection to the scheduler's server is not usable"
        if not permitted:
            return False, ("the connected user may not request actions "
                           "(hold, release, Run now, Replay)")
        try:
            await self._call("schedules.hold", None, api.ScheduleView,
                             timeout=min(self.timeout, 2.0))
        except _NoService as exc:
            why = await self._none_serves()
            return False, f"{why or exc}: actions need a running scheduler process"
        except api.AdminError as exc:
            if exc.code == api.ErrorCode.INVALID_REQUEST:
                return True, None
            return False, exc.message
        return True, None

    # ------------------------------------------------------------------ events

    def events(self, *, deployment_id: str | None = None, types: set[str] | None = None,
               history: int = 100) -> AsyncIterator[AnyEvent]:
        """The last ``history`` matching events (oldest first), then new ones as appended."""
        return follow(EventFeed(self.nc, self.names, deployment_id=deployment_id,
                                 types=types, timeout=self.timeout), history)

    async def recent_events(self, *, deployment_id: str | None = None,
                            types: set[str] | None = None, history: int = 100
                            ) -> list[AnyEvent]:
        """Only the last ``history`` matching events, oldest first (no waiting for new ones)."""
        feed = EventFeed(self.nc, self.names, deployment_id=deployment_id, types=types,
                         timeout=self.timeout)
        try:
            return await guarded("events", lambda: feed.start(history, wait=False))
        finally:
            await feed.close()


async def follow(feed: EventFeed, history: int) -> AsyncIterator[AnyEvent]:
    """The feed's history, then each new event; closed when the caller stops. A history
    that cannot be read is the admin's UNAVAILABLE, like every read of the store."""
    try:
        for event in await guarded("events", lambda: feed.start(history)):
            yield event
        async for event in feed.live():
            yield event
    finally:
        await feed.close()


def merge_bulk(pages: list[api.BulkResult]) -> api.BulkResult:
    """The pages of one bulk action as one answer (the lists joined, the counts summed)."""
    return api.BulkResult(
        changed=[dep for page in pages for dep in page.changed],
        unchanged=[dep for page in pages for dep in page.unchanged],
        changed_count=sum(page.changed_total for page in pages),
        unchanged_count=sum(page.unchanged_total for page in pages),
        truncated=any(page.truncated for page in pages))


async def _wrap_list(views: Awaitable[list[api.ScheduleView]]) -> api.ScheduleList:
    return api.ScheduleList(schedules=await views)


def _decode_answer(msg: Msg, answer: type[A]) -> A:
    headers = msg.headers or {}
    if headers.get(HDR_STATUS) == "503":
        raise _NoService("no scheduler process is running")
    if HDR_SERVICE_ERROR_CODE in headers or msg.data.startswith(b'{"error"'):
        try:
            error = msgspec.json.decode(msg.data, type=api.ErrorAnswer).error
        except (msgspec.ValidationError, msgspec.DecodeError):
            raise api.AdminError(api.ErrorCode.INTERNAL,
                             headers.get(HDR_SERVICE_ERROR) or "the scheduler failed") from None
        raise api.AdminError(error.code, error.message, retry_after=error.retry_after)
    try:
        return msgspec.json.decode(msg.data, type=answer)
    except (msgspec.ValidationError, msgspec.DecodeError):
        raise api.AdminError(api.ErrorCode.INTERNAL,
                         "the scheduler sent an answer this client cannot read "
                         "(are both the same version?)") from None



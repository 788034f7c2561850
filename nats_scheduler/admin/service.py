"""The admin service: every provider process answers operators on ``<P>.admin.*``.

Built on ``nats.micro`` (service name ``astrabox-scheduler``, metadata ``prefix`` and
``identity``), so ``nats micro list/info/stats`` discover it; the binding to the server is
``jetstream/admin_transport.py``, and this module decides what each endpoint answers. All
endpoints share the default queue group, so one replica answers each request, except
``replica.status``, which every replica answers (a queue group of its own) so cluster status
can count them.

Requests and answers are the msgspec types of :mod:`.api`, as JSON, a request decoded and
bounded in one place (:mod:`.request_checks`); past its limit, or the service's share of the
loop, an endpoint answers busy at once (:mod:`.admission`). Every failure answers
``{"error": {"code", "message"}}`` with a stable :class:`~.api.ErrorCode` (and the
``Nats-Service-Error``/``-Code`` headers micro clients look for); messages speak AstraBox's
words. Actions go through the provider (hold/release, enqueue), so each one is an event
recording who asked and why: ``schedule.held``/``schedule.released`` carry ``by`` and
``reason``, ``run.created`` carries ``requested_by`` and ``reason``.

Who asked: with a login of its own (``ASTRABOX_NATS_SERVICE_USER``, an account of its own
that operators import it from) the service serves on its own connection and records, for
every action, the user the server authenticated for the request (:mod:`.callers`): ``by``
and ``requested_by`` are that user, ``caller`` names it with its account, and a name the
operator only stated (``--by``) is ``on_behalf_of``. Without one it serves on the provider's
connection and records the names the client gives.

The provider serves it: ``start()`` starts one after its loops run and ``stop()`` stops it
first, in every process AstraBox loads the provider into (so the console and
``nats-scheduler`` actions work with no extra process), unless
``ASTRABOX_NATS_ADMIN_SERVICE=0``. When the server refuses the service's subscriptions (a
replica without the service login on the shipped config), ``start()`` logs an ERROR naming
the setting and the replica goes on firing without serving (``serving`` says why; its key in
the replicas bucket too, so ``status`` still counts it). :func:`start_admin_service`
replaces a started provider's service with one of other options (tests pass a clock or a
health policy); there is never more than one per process, or ``replica.status`` would count
it twice.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

import msgspec

from ..clock import Clock, SystemClock
from ..core.events import Caller, ScheduleRecord
from ..core.refusals import Refusal
from ..core.serving import Serving
from ..jetstream.admin_transport import AdminReply, AdminRequest, Endpoint, ServiceBinding
from ..names import SERVICE_NAME
from ..release import installed_version
from ..seam import EnqueueRequest, Trigger
from . import admission
from .account_reads import AccountReader
from .admission import charged
from .api import (
    AdminError,
    BulkAction,
    BulkResult,
    ClusterStatus,
    DueAccount,
    EmptyRequest,
    ErrorCode,
    ExplainRequest,
    Health,
    LoadAhead,
    LoadRequest,
    OperatorAction,
    ReplayRequest,
    ReplicaView,
    RunList,
    RunListRequest,
    RunNowRequest,
    RunRef,
    RunView,
    ScheduleDetail,
    ScheduleList,
    ScheduleListRequest,
    ScheduleRef,
    ScheduleView,
)
from .bounded import (
    PAGE_BYTES_MIN,
    bounded_cluster_status,
    fit,
    reply_budget,
)
from .bulk import change_matching
from .callers import proven_caller, requester, stated, who_text
from .health import HealthPolicy
from .herd_watch import BusiestMinute
from .host import AdminHost
from .load import LoadCounter
from .reader import REPLICA_STATUS_ENDPOINT, StoreReader
from .replica_answers import health_of, replica_view
from .request_checks import check_request, decode_request
from .service_errors import error_body, error_headers, optional_reason, required, to_admin_error
from .serving import refused_at_start
from .views import probe_limit, run_list, schedule_detail, schedule_page, schedule_view

log = logging.getLogger(__name__)

R = TypeVar("R", bound=msgspec.Struct)

_encoder = msgspec.json.Encoder()


ACTIONS = frozenset({"schedules.hold", "schedules.release", "schedules.hold_bulk",
                     "schedules.release_bulk", "runs.run_now", "runs.replay"})
"""The endpoints that change something: their handlers are told who sent the request."""


class AdminService:
    """The micro service of one provider process. Use :func:`start_admin_service`."""

    def __init__(self, provider: AdminHost, *, policy: HealthPolicy | None = None,
                 clock: Clock | None = None, limits: Mapping[str, int] | None = None) -> None:
        self.provider = provider
        self.clock: Clock = clock or SystemClock()
        store = provider.store
        self.nc = store.nc
        self.names = store.names
        self.policy = policy or HealthPolicy(lease_seconds=provider.settings.lease_seconds)
        self.reader = StoreReader(self.nc, self.names.prefix, policy=self.policy,
                                  clock=self.clock)
        self.started_at: datetime | None = None
        self._service: ServiceBinding | None = None
        self._busiest = BusiestMinute()
        self._load = LoadCounter()
        self.serving = Serving.STARTING
        """Whether it serves once started, or why not (this replica's key says it)."""
        self.limits = {**admission.ENDPOINT_LIMITS, **(limits or {})}
        """Endpoint -> requests answered at once (:mod:`.admission`; tests lower them)."""
        self.share = admission.LoopShare(firing=lambda: admission.fires(provider))
        """The loop time the requests hold, capped while it fires (:mod:`.admission`)."""
        self.status_flight = admission.SingleFlight(
            lambda: charged(self._gather_status(), self.share))

    @property
    def _clock_now(self) -> datetime:
        return self.clock.now()

    def _store_now(self) -> datetime:
        """The store's clock as the provider keeps it (a hold's end is judged by it)."""
        running = self.provider.runtime
        return running.clock.now() if running is not None else self._clock_now

    @property
    def service(self) -> ServiceBinding:
        assert self._service is not None, "start() first"
        return self._service

    @property
    def proves_callers(self) -> bool:
        """Whether the service serves on a connection of its own (its login, its account),
        where the server's ``Nats-Request-Info`` header says who sent each request
        (:mod:`.callers`)."""
        return self._service is not None and self._service.own_connection

    # ------------------------------------------------------------------ lifecycle

    def endpoints(self) -> dict[str, tuple[type[msgspec.Struct], Callable[[Any], Awaitable[Any]]]]:
        """Endpoint (under ``<P>.admin.``) -> (request type, handler)."""
        return {
            "schedules.list": (ScheduleListRequest, self.list_schedules),
            "schedules.get": (ScheduleRef, self.get_schedule),
            "schedules.hold": (OperatorAction, self.hold),
            "schedules.release": (OperatorAction, self.release),
            "schedules.hold_bulk": (BulkAction, self.hold_bulk),
            "schedules.release_bulk": (BulkAction, self.release_bulk),
            "schedules.explain": (ExplainRequest, self.explain),
            "schedules.load": (LoadRequest, self.load),
            "runs.list": (RunListRequest, self.list_runs),
            "runs.get": (RunRef, self.get_run),
            "runs.run_now": (RunNowRequest, self.run_now),
            "runs.replay": (ReplayRequest, self.replay),
            "cluster.status": (EmptyRequest, self.cluster_status),
            "health": (EmptyRequest, self.health),
        }

    async def start(self) -> None:
        identity = self.provider.identity
        login = self.provider.settings.service_login()
        self._service = await ServiceBinding.start(
            self.nc, login,
            client_name=f"{identity} admin service",
            name=SERVICE_NAME,
            version=installed_version(),
            description="AstraBox scheduler: Schedules, Runs, holds and health",
            metadata={"prefix": self.names.prefix, "identity": identity,
                      # what an action records as who acted (`nats micro info` shows it)
                      "callers": "authenticated" if login is not None else "stated"},
            violations=self.provider.store.violations,
        )
        busy = admission.busy_error()
        busy_reply = AdminReply(error_body(busy), headers=error_headers(busy))
        for endpoint, (kind, handler) in self.endpoints().items():
            await self.service.add_endpoint(
                endpoint.replace(".", "_"), self.names.admin_subject(endpoint),
                self._wrap(endpoint, kind, handler, acts=endpoint in ACTIONS),
                gate=self._gate(endpoint), busy=busy_reply,
            )
        await self.service.add_endpoint(
            REPLICA_STATUS_ENDPOINT.replace(".", "_"),
            self.names.admin_subject(REPLICA_STATUS_ENDPOINT),
            self._wrap(REPLICA_STATUS_ENDPOINT, EmptyRequest, self.replica_status,
                       gated=False),
            gate=self._gate(REPLICA_STATUS_ENDPOINT), busy=busy_reply,
            queue_group=f"replica-{self.service.id}",
        )
        subscriptions = await self.service.ready()
        if not subscriptions.accepted:  # the server dropped them: nobody is served here
            log.error("%s", refused_at_start(self.names.prefix, identity,
                                             own_login=login is not None))
            await self.stop()
            self.serving = Serving.LOGIN_REFUSED if login is not None else Serving.REFUSED
            return
        if subscriptions.discovery_refused:
            log.warning("the server refused the admin service's discovery (nats micro "
                        "list/info do not show replica %s); its requests are served", identity)
        self.serving = Serving.YES
        self.started_at = self._clock_now
        log.info("admin service for prefix %s started (%s)", self.names.prefix, identity)

    async def stop(self) -> None:
        """Stop serving (and close the service's own connection); never fails a shutdown."""
        service, self._service = self._service, None
        if self.serving == Serving.YES:
            self.serving = Serving.STOPPED
        if service is not None:
            await service.stop()
        await self.status_flight.cancel()

    # ------------------------------------------------------------------ plumbing

    def _gate(self, endpoint: str) -> admission.EndpointGate:
        return admission.EndpointGate(self.limits[endpoint], self.share,
                                      exempt=endpoint in admission.EXEMPT)

    def _wrap(self, endpoint: str, kind: type[R], handler: Callable[..., Awaitable[Any]], *,
              gated: bool = True, acts: bool = False) -> Endpoint:
        """The request decoded and bounded first (:mod:`.request_checks`: the only
        ``invalid_request`` of a body). ``gated``: answer only once the provider has loaded
        its Schedules (every answer but ``replica.status``, which says whether it has).
        ``acts``: an action, whose handler is also given who sent it
        (:func:`.callers.proven_caller`)."""
        async def handle(request: AdminRequest) -> AdminReply:
            return await charged(answer(request), self.share)

        async def answer(request: AdminRequest) -> AdminReply:
            try:
                payload = decode_request(kind, request.data, endpoint)
                check_request(payload, self._clock_now, store_now=self._store_now())
                if gated:
                    await self.provider.until_ready()
                if acts:
                    caller = proven_caller(request.headers, proves=self.proves_callers)
                    answer = await handler(payload, caller)
                else:
                    answer = await handler(payload)
                return AdminReply(_encoder.encode(answer))
            except Exception as exc:  # every failure answers clean JSON, never a repr
                error = to_admin_error(exc)
                if error.code == ErrorCode.INTERNAL:
                    log.exception("admin request on %s failed", request.subject)
                return AdminReply(error_body(error), headers=error_headers(error))

        return handle

    def _view(self, record: ScheduleRecord) -> ScheduleView:
        return schedule_view(record, self.provider.ledger, self._clock_now)

    # ------------------------------------------------------------------ Schedules

    async def list_schedules(self, req: ScheduleListRequest) -> ScheduleList:
        """One page of the list: half the server's largest message at most, so any number
        of Schedules crosses in pages (the client asks for the next ones)."""
        budget = max(PAGE_BYTES_MIN, self.provider.store.max_payload // 2)
        page, next_after = schedule_page(
            self.provider.schedules, self.provider.ledger, self._clock_now,
            budget=budget, filter=req.filter, include_deleted=req.include_deleted,
            after=req.after)
        return ScheduleList(schedules=page, next_after=next_after)

    async def get_schedule(self, req: ScheduleRef) -> ScheduleDetail:
        record = self.provider.schedules.get(req.deployment_id)
        if record is None:
            record = await self.reader.schedule_record(req.deployment_id)
        if record is None:
            raise AdminError(ErrorCode.NOT_FOUND,
                             f"deployment {req.deployment_id!r} has no schedule")
        return schedule_detail(record, self.provider.ledger, self._clock_now)

    async def hold(self, req: OperatorAction, caller: Caller | None) -> ScheduleView:
        return await self._change(req, caller, held=True)

    async def release(self, req: OperatorAction, caller: Caller | None) -> ScheduleView:
        return await self._change(req, caller, held=False)

    async def _change(self, req: OperatorAction, caller: Caller | None, *,
                      held: bool) -> ScheduleView:
        """Hold or release one Schedule, recording who (proven when ``caller``) and why."""
        by, reason = required(req.by, "by"), required(req.reason, "reason")
        if not held and req.until is not None:
            raise AdminError(ErrorCode.INVALID_REQUEST,
                             "until is the end of a hold: a release takes none")
        behalf = stated(req.on_behalf_of)
        ends = {"until": req.until} if held and req.until is not None else {}
        change = self.provider.hold if held else self.provider.release
        record = await change(req.deployment_id, by=by, reason=reason, caller=caller,
                              on_behalf_of=behalf, **ends)
        log.info("%s %s %s: %s", who_text(by, caller, behalf), "held" if held else "released",
                 req.deployment_id, reason)
        return self._view(record)

    async def _bulk(self, req: BulkAction, caller: Caller | None, held: bool) -> BulkResult:
        """Hold or release the Schedules a filter matches (admin/bulk.py), then log it."""
        result = await change_matching(self.provider, req, held, caller)
        log.info("%s %s %d schedules matching %r (%d unchanged%s): %s",
                 who_text(req.by.strip(), caller, stated(req.on_behalf_of)),
                 "held" if held else "released", result.changed_count, req.filter.strip(),
                 result.unchanged_count, ", more follow" if result.next_after else "",
                 req.reason.strip())
        return result

    async def explain(self, req: ExplainRequest) -> DueAccount:
        """A page of the account of due times, from the store (any replica answers), with
        the deployment's refusal if one stands. A page that would not fit one message is
        asked again with half as many due times."""
        reader = AccountReader(self.provider.store)
        refusal = await self._refusal(req.deployment_id)
        limit = req.limit
        while True:
            page = await reader.page(req.deployment_id, now=self._clock_now, since=req.since,
                                     until=req.until, before=req.before, limit=limit,
                                     running=True, refusal=refusal)
            if limit == 1 or len(_encoder.encode(page)) <= self._budget():
                return page
            limit //= 2

    async def _refusal(self, deployment_id: str) -> Refusal | None:
        """This replica's refusal of the deployment; for one it has no Schedule of, any
        replica's (a replica refuses at its own start: they may differ for a while)."""
        running = self.provider.runtime
        found = None if running is None else running.refusals.get(deployment_id)
        if found is not None or self.provider.schedules.get(deployment_id) is not None:
            return found
        try:
            views = await self.reader.replicas()
        except AdminError:
            return None  # the account says what the store has, as without refusals
        return next((r for view in views for r in view.refused
                     if r.deployment_id == deployment_id), None)

    async def load(self, req: LoadRequest) -> LoadAhead:
        """Scheduled Runs due per minute ahead, herds named by the live replicas (load.py)."""
        running = self.provider.runtime
        return await self._load.answer(
            self.provider.schedules.live(), self._clock_now, req.hours,
            replicas=running.live_replicas() if running else 1, rate=self.policy.fire_rate,
            charge=self.share.charge)
    async def hold_bulk(self, req: BulkAction, caller: Caller | None) -> BulkResult:
        return await self._bulk(req, caller, held=True)

    async def release_bulk(self, req: BulkAction, caller: Caller | None) -> BulkResult:
        return await self._bulk(req, caller, held=False)

    # ------------------------------------------------------------------ Runs

    async def list_runs(self, req: RunListRequest) -> RunList:
        probe = await self.provider.runs_page(req.deployment_id, limit=probe_limit(req.limit),
                                              before=req.before)
        page = run_list(probe, req.limit)
        # A page of large Runs (prompts up to the Schedule size limit) may not fit one
        # message: then it ends early and ``next_before`` continues it.
        kept = fit(page.runs, self._budget()) or page.runs[:1]
        if len(kept) == len(page.runs):
            return page
        return RunList(runs=kept, next_before=kept[-1].run_id)

    async def get_run(self, req: RunRef) -> RunView:
        run = await self.provider.get_run(req.run_id)
        record = self.provider.ledger.get(run.run_id)
        return record if record is not None else RunView.from_run(run)

    async def _enqueue(self, request: EnqueueRequest, reason: str | None,
                       on_behalf_of: str | None = None) -> RunView:
        run = await self.provider.enqueue(request, reason=reason, on_behalf_of=on_behalf_of)
        log.info("%s asked for %s of %s (%s): run %s", request.requested_by,
                 request.trigger.value, request.deployment_id, reason or "no reason", run.run_id)
        record = self.provider.ledger.get(run.run_id)
        return record if record is not None else RunView.from_run(run)

    async def run_now(self, req: RunNowRequest, caller: Caller | None) -> RunView:
        by, behalf = requester(req.by, req.on_behalf_of, caller)
        return await self._enqueue(EnqueueRequest(
            deployment_id=req.deployment_id, trigger=Trigger.RUN_NOW,
            request_id=req.request_id, requested_by=by), optional_reason(req.reason), behalf)

    async def replay(self, req: ReplayRequest, caller: Caller | None) -> RunView:
        by, behalf = requester(req.by, req.on_behalf_of, caller)
        original = await self.provider.get_run(req.run_id)
        return await self._enqueue(EnqueueRequest(
            deployment_id=original.deployment_id, trigger=Trigger.REPLAY,
            replay_of=original.run_id, request_id=req.request_id, requested_by=by),
            optional_reason(req.reason), behalf)

    # ------------------------------------------------------------------ cluster

    def _budget(self) -> int:
        return reply_budget(self.provider.store.max_payload)

    async def replica_status(self, _req: EmptyRequest) -> ReplicaView:
        return replica_view(self.provider, started_at=self.started_at, now=self._clock_now,
                            budget=self._budget())

    async def cluster_status(self, _req: EmptyRequest) -> ClusterStatus:
        """Every replica, lease and Run in flight: the lists cut to fit one message, each
        with its count (admin/bounded.py). Callers share one fan-out: one arriving while one
        runs gets its answer (:class:`.admission.SingleFlight`)."""
        return await self.status_flight()

    async def _gather_status(self) -> ClusterStatus:
        return bounded_cluster_status(await self.reader.cluster_status(), self._budget())

    async def health(self, _req: EmptyRequest) -> Health:
        return await health_of(self.provider, self.reader, self.policy, self._busiest,
                               started_at=self.started_at, now=self._clock_now,
                               budget=self._budget())


async def start_admin_service(provider: AdminHost, *,
                              policy: HealthPolicy | None = None,
                              clock: Clock | None = None,
                              limits: Mapping[str, int] | None = None) -> AdminService:
    """Serve a started provider's admin service with these options, replacing its own.

    The provider stops it at ``stop()``; stopping it earlier (``service.stop()``) leaves the
    process without one. ``clock`` is the clock of the answers' "now" (next due times,
    health); pass the provider's own when tests drive it with a ManualClock. ``limits``:
    endpoint -> requests answered at once, over :data:`.admission.ENDPOINT_LIMITS`.
    """
    service = AdminService(provider, policy=policy, clock=clock, limits=limits)
    running = provider.runtime
    assert running is not None  # AdminService() above refuses a provider not started
    await running.serve(service)
    return service

"""The admin service's binding to the server: a ``nats.micro`` service and its endpoints.

``admin/service.py`` decides what each endpoint answers; this module puts it on the wire.
The service is a ``nats.micro`` one (so ``nats micro list/info/stats`` discover it), served
on the provider's connection or on one of its own, opened with the service's login (an
account of its own, where the server stamps each request with its sender). An endpoint is
a coroutine from an :class:`AdminRequest` (the body, the headers, the subject) to an
:class:`AdminReply`; nats-py's request and service classes stay here.

The server may refuse the subscriptions (a login whose permissions do not cover the admin
subjects): it drops them and reports each on the connection, and a request then finds
nobody. :meth:`ServiceBinding.ready` says which it refused (:class:`Subscriptions`), exactly:
the server answers one connection's commands in order, and nats-py hands its error to the
connection's ``error_cb`` (a :class:`~.permissions.ViolationLog`) before it reads the PONG
of a later PING (``jetstream/permissions.py``).

nats-py 2.16 calls a subscription's handler one message at a time, awaiting each (micro
endpoints are subscriptions), so one slow request kept every later one of its endpoint
waiting, unanswered. Here each request is answered in a task of its own, as long as the
endpoint's :class:`Gate` takes it; else the endpoint's ``busy`` reply goes out at once, from
the subscription's own loop, without starting anything (:class:`_Lane`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from nats.aio.client import Client
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import Service

from ..settings import NatsSettings
from ..tasks import cancel_and_wait
from .connection import connect
from .permissions import ViolationLog

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdminRequest:
    """One request to an endpoint, as the handler needs it."""

    data: bytes
    headers: dict[str, str] | None
    """Among them, on a connection of the service's own, ``Nats-Request-Info`` (who sent it)."""
    subject: str


@dataclass(frozen=True)
class AdminReply:
    """The answer to one request: its body, and headers (the micro service error ones)."""

    body: bytes
    headers: dict[str, str] | None = None


Endpoint = Callable[[AdminRequest], Awaitable[AdminReply]]


@dataclass(frozen=True)
class Subscriptions:
    """What the server did with the service's subscriptions (:meth:`ServiceBinding.ready`)."""

    checked: bool
    """Whether the connection reports the server's refusals (without a log, nobody knows)."""
    refused: tuple[str, ...] = ()
    """The endpoints' subjects the server refused: those requests find nobody here."""
    discovery_refused: bool = False
    """The server refused the discovery subjects (``nats micro list/info`` miss it)."""

    @property
    def accepted(self) -> bool:
        """Whether every endpoint serves (as far as the connection could tell)."""
        return not self.refused


STOP_SECONDS = 2.0
"""How long a stop waits for the requests being answered once they are cancelled."""


class Gate(Protocol):
    """Whether an endpoint takes one more request now (``enter``), and that it is done with
    one it took (``leave``): the admin service's admission (``admin/admission.py``)."""

    def enter(self) -> bool: ...

    def leave(self) -> None: ...


class _Lane:
    """One endpoint's requests: each answered in a task of its own while ``gate`` takes
    them; else ``busy`` is the answer, sent at once."""

    def __init__(self, endpoint: Endpoint, gate: Gate, busy: AdminReply,
                 tasks: set[asyncio.Task[None]]) -> None:
        self._endpoint = endpoint
        self._gate = gate
        self._busy = busy
        self._tasks = tasks

    async def __call__(self, request: Request) -> None:
        """The micro handler: returns at once, so the next request is read at once."""
        if not self._gate.enter():
            await request.respond(self._busy.body, headers=self._busy.headers)
            return
        task = asyncio.create_task(self._answer(request))
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        await asyncio.sleep(0)  # its first step before the next request: a quick answer
        # (from memory) frees its place at once, and a burst does not hog the loop

    async def _answer(self, request: Request) -> None:
        try:
            reply = await self._endpoint(AdminRequest(request.data or b"", request.headers,
                                                      request.subject))
            await request.respond(reply.body, headers=reply.headers)
        finally:
            self._gate.leave()

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # the endpoint answers every failure itself: this is a reply that could not be
            # sent (the connection closed); the caller times out and says so
            log.debug("an admin answer could not be sent", exc_info=task.exception())


class ServiceBinding:
    """One started micro service and, when it has one, its own connection.

    Use :meth:`start`; add the endpoints; :meth:`ready` once they are all added; :meth:`stop`.
    """

    def __init__(self, service: Service, served_on: Client, own: bool,
                 violations: ViolationLog | None = None, mark: int = 0) -> None:
        self._service = service
        self._served_on = served_on
        self._answering: set[asyncio.Task[None]] = set()
        self.own_connection = own
        """Whether the service serves on a connection of its own (its login)."""
        self._violations = violations
        self._mark = mark
        self._subjects: list[str] = []

    @classmethod
    async def start(cls, nc: Client, login: NatsSettings | None, *, client_name: str,
                    name: str, version: str, description: str,
                    metadata: dict[str, str],
                    violations: ViolationLog | None = None) -> ServiceBinding:
        """Start the service on a connection opened with ``login``, else on ``nc`` (the
        provider's, whose refusals ``violations`` records, when its connect was given one).
        Raises the seam's errors when the login cannot connect."""
        if login is not None:
            violations = ViolationLog()
            own: Client | None = await connect(login, client_name,
                                               error_cb=violations.on_error)
        else:
            own = None
        served_on = own or nc
        mark = violations.mark() if violations is not None else 0
        try:
            service = await add_service(served_on, name=name, version=version,
                                        description=description, metadata=metadata)
        except BaseException:
            if own is not None:
                await own.close()
            raise
        return cls(service, served_on, own is not None, violations, mark)

    @property
    def id(self) -> str:
        """The service instance's ID (``nats micro info`` names it)."""
        return str(self._service.id)

    async def add_endpoint(self, name: str, subject: str, endpoint: Endpoint, *, gate: Gate,
                           busy: AdminReply, queue_group: str | None = None) -> None:
        """Serve ``endpoint`` on ``subject`` (in the default queue group unless given),
        answering the requests ``gate`` takes and ``busy`` to the others."""
        options = {} if queue_group is None else {"queue_group": queue_group}
        lane = _Lane(endpoint, gate, busy, self._answering)
        await self._service.add_endpoint(name=name, subject=subject, handler=lane, **options)
        self._subjects.append(subject)

    async def ready(self) -> Subscriptions:
        """Return once the server has every endpoint's subscription, or has refused it.

        Twice: nats-py 2.16 writes a flush's PING straight to the socket, possibly ahead of
        subscriptions its flusher has not written yet, so one PONG does not prove the server
        has them (a request right after start could find no responder). The second PING
        follows them on the wire (nats-io/nats.py, Client.flush / _flusher). A refusal
        arrives before that PONG, so what the log holds by then is the whole answer.
        """
        await self._served_on.flush()
        await self._served_on.flush()
        if self._violations is None:
            return Subscriptions(checked=False)
        refused = {subject for kind, subject in self._violations.since(self._mark)
                   if kind == "subscription"}
        return Subscriptions(
            checked=True,
            refused=tuple(s for s in self._subjects if s.lower() in refused),
            discovery_refused=any(s.startswith("$srv.") for s in refused))

    async def stop(self) -> None:
        """Stop the service, then close its own connection. Neither failure is raised (a
        closed connection must not fail a shutdown); both are logged."""
        try:
            await self._service.stop()
        except Exception:
            log.debug("stopping the admin service failed", exc_info=True)
        left = await cancel_and_wait(list(self._answering), timeout=STOP_SECONDS)
        if left:
            log.warning("%d admin requests were still being answered at the stop", len(left))
        if self.own_connection:
            try:
                await self._served_on.close()
            except Exception:
                log.debug("closing the admin service's connection failed", exc_info=True)


__all__ = ["AdminReply", "AdminRequest", "Endpoint", "Gate", "ServiceBinding",
           "Subscriptions"]

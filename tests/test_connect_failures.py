"""One verdict on a failed connect, from every error seen, for provider, CLI and console.

The server answers a wrong password with ``-ERR 'Authorization Violation'`` and closes the
socket; nats-py then often reports ``ConnectionResetError`` right after the refusal. A
verdict taken from the LAST error called that "no server answered" about one time in
three; :func:`classify_connect_failure` decides by kind, whatever the order.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import nats.errors
import pytest

from admin_tui.launch import ConnectionLink
from admin_tui.screens.connect import describe_failure
from nats_scheduler.jetstream.connection import (
    ConnectFailure,
    ConnectMisconfigured,
    ConnectUnavailable,
    FailureKind,
    classify_connect_failure,
    connect,
    connect_error,
    failure_kind,
)
from nats_scheduler.jetstream.permissions import ViolationLog
from nats_scheduler.natsserver.process import free_port
from nats_scheduler.seam import SchedulerConfigurationError, SchedulerUnavailable
from tests.providers import settings
from tests.security_support import PASSWORDS, prod_server

pytestmark = pytest.mark.anyio

ATTEMPTS = 10


def refusal() -> nats.errors.Error:
    """What nats-py 2.16 raises for ``-ERR 'Authorization Violation'`` during the handshake."""
    return nats.errors.Error("nats: 'Authorization Violation'")


def reset() -> ConnectionResetError:
    return ConnectionResetError(104, "Connection reset by peer")


# =========================================================================== the classifier


@pytest.mark.parametrize("order", [
    "refusal refusal reset", "refusal reset refusal", "reset refusal", "reset reset refusal",
    "timeout reset refusal reset",
])
def test_a_refusal_wins_in_any_order(order: str) -> None:
    make = {"refusal": refusal, "reset": reset, "timeout": TimeoutError}
    errors = [make[name]() for name in order.split()]
    verdict = classify_connect_failure(errors)
    assert verdict.kind is FailureKind.REFUSED_CREDENTIALS
    assert verdict.cause is errors[order.split().index("refusal")]
    assert verdict.final


def test_errors_are_recognised_by_type() -> None:
    untrusted = ssl.SSLCertVerificationError("certificate verify failed")
    assert failure_kind(nats.errors.AuthorizationError()) is FailureKind.REFUSED_CREDENTIALS
    assert failure_kind(nats.errors.InvalidUserCredentialsError()) is \
        FailureKind.REFUSED_CREDENTIALS
    assert failure_kind(untrusted) is FailureKind.TLS_UNTRUSTED
    assert failure_kind(ssl.SSLError("tlsv13 alert certificate required")) is \
        FailureKind.TLS_REFUSED
    for unreachable in (reset(), ConnectionRefusedError(), TimeoutError(), OSError(),
                        nats.errors.NoServersError(), nats.errors.TimeoutError(),
                        nats.errors.Error("nats: 'Maximum Connections Exceeded'")):
        assert failure_kind(unreachable) is FailureKind.UNREACHABLE, unreachable


def test_precedence_is_by_kind_not_by_order() -> None:
    untrusted = ssl.SSLCertVerificationError("certificate verify failed")
    refused_tls = ssl.SSLError("tlsv13 alert certificate required")
    assert classify_connect_failure([refused_tls, untrusted]).kind is FailureKind.TLS_UNTRUSTED
    assert classify_connect_failure([untrusted, refusal()]).kind is \
        FailureKind.REFUSED_CREDENTIALS
    assert classify_connect_failure([reset(), refused_tls, reset()]).kind is \
        FailureKind.TLS_REFUSED
    timed_out = TimeoutError()
    verdict = classify_connect_failure([timed_out, reset()])
    assert verdict == ConnectFailure(FailureKind.UNREACHABLE, timed_out) and not verdict.final
    assert classify_connect_failure([]) == ConnectFailure(FailureKind.UNREACHABLE, None)


def test_the_verdict_picks_the_seam_error() -> None:
    refused = connect_error(ConnectFailure(FailureKind.REFUSED_CREDENTIALS, refusal()), "no")
    assert isinstance(refused, ConnectMisconfigured)
    assert isinstance(refused, SchedulerConfigurationError)
    assert isinstance(refused.__cause__, nats.errors.Error)
    down = connect_error(ConnectFailure(FailureKind.UNREACHABLE), "down")
    assert isinstance(down, ConnectUnavailable) and isinstance(down, SchedulerUnavailable)
    for kind in (FailureKind.TLS_UNTRUSTED, FailureKind.TLS_REFUSED):
        assert isinstance(connect_error(ConnectFailure(kind), "tls"), ConnectMisconfigured)


# =========================================================================== real servers


async def test_a_wrong_password_is_refused_every_time(tmp_path: Path) -> None:
    """The console's launcher and the provider's connect: "refused", all ten attempts."""
    with prod_server(tmp_path / "nats") as server:
        wrong = settings(server.url, "SCHED", user="auditor", password="wrong")
        for attempt in range(ATTEMPTS):
            link = ConnectionLink(wrong)
            with pytest.raises(ConnectMisconfigured) as console:
                await link.connect()
            assert console.value.failure.kind is FailureKind.REFUSED_CREDENTIALS, attempt
            title, detail, _hint = describe_failure(console.value, server.url)
            assert "refused the credentials" in title and "refused" in detail
            with pytest.raises(ConnectMisconfigured) as provider:
                await connect(wrong, "provider")
            assert provider.value.failure.kind is FailureKind.REFUSED_CREDENTIALS, attempt
            assert "refused the configured credentials" in str(provider.value)


async def test_no_server_is_unavailable_and_never_reports_a_drop() -> None:
    drops: list[str] = []

    async def dropped() -> None:
        drops.append("dropped")

    nowhere = settings(f"nats://127.0.0.1:{free_port()}", "SCHED", connect_timeout=0.5)
    with pytest.raises(ConnectUnavailable) as info:
        await connect(nowhere, "provider", disconnected_cb=dropped)
    assert info.value.failure.kind is FailureKind.UNREACHABLE
    assert "no server answered" in str(info.value)
    assert drops == []  # closing the never-connected client is not a lost connection


async def test_once_connected_errors_reach_the_callers_log(tmp_path: Path) -> None:
    """A ViolationLog created before connecting sees the server's permission refusals."""
    with prod_server(tmp_path / "nats") as server:
        log = ViolationLog()
        auditor = settings(server.url, "SCHED", user="auditor", password=PASSWORDS["auditor"])
        nc = await connect(auditor, "auditor", error_cb=log.on_error)
        try:
            mark = log.mark()
            await nc.publish("SCHED.run.dep.run", b"{}")
            await log.settle(nc)
            assert log.refused_since(mark, "publish", "SCHED.run.dep.run")
        finally:
            await nc.close()

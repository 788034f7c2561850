"""TLS end to end: the production config with a ``tls`` block, the provider via ASTRABOX_NATS_TLS_*.

A test CA and certificates are made per module with ``trustme``. The server requires TLS
and a client certificate (``verify: true``, mutual TLS) on top of the config's passwords.
The provider is configured the way AstraBox configures it: from the environment only.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from nats_scheduler import NatsSchedulerProvider
from nats_scheduler.admin.client import AdminClient
from nats_scheduler.admin.doctor import Status, run_doctor
from nats_scheduler.jetstream.connection import connect
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.seam import (
    EnqueueRequest,
    RunPayload,
    RunState,
    Schedule,
    SchedulerConfigurationError,
    Trigger,
)
from nats_scheduler.settings import NatsSettings
from nats_scheduler.testing.handler import RecordingRunHandler
from tests.providers import FAST, MongoBackend, assert_clean, eventually
from tests.security_support import PASSWORDS, prod_server

pytestmark = pytest.mark.anyio


class Pki:
    """The test CA's files: ca.pem, server.pem (key + chain), client.pem, client-key.pem."""

    def __init__(self, root: Path) -> None:
        ca = trustme.CA()
        self.ca = root / "ca.pem"
        self.server = root / "server.pem"
        self.client = root / "client.pem"
        self.client_key = root / "client-key.pem"
        self.other_ca = root / "other-ca.pem"
        ca.cert_pem.write_to_path(str(self.ca))
        ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
            str(self.server))
        client = ca.issue_cert("scheduler@astrabox.test")
        client.cert_chain_pems[0].write_to_path(str(self.client))
        client.private_key_pem.write_to_path(str(self.client_key))
        trustme.CA().cert_pem.write_to_path(str(self.other_ca))

    def server_block(self) -> str:
        return (f'tls {{\n  cert_file: "{self.server}"\n  key_file: "{self.server}"\n'
                f'  ca_file: "{self.ca}"\n  verify: true\n  timeout: 2\n}}')


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[NatsServer]:
    with prod_server(tmp_path_factory.mktemp("tls") / "nats",
                     extra_config=pki.server_block()) as server:
        yield server


def tls_env(server: NatsServer, pki: Pki, user: str = "scheduler") -> dict[str, str]:
    return {
        "ASTRABOX_NATS_URL": f"tls://127.0.0.1:{server.port}",
        "ASTRABOX_NATS_USER": user,
        "ASTRABOX_NATS_PASSWORD": PASSWORDS[user],
        "ASTRABOX_NATS_TLS_CA": str(pki.ca),
        "ASTRABOX_NATS_TLS_CERT": str(pki.client),
        "ASTRABOX_NATS_TLS_KEY": str(pki.client_key),
        "ASTRABOX_NATS_RETRY_INITIAL_SECONDS": "0.01",
        "ASTRABOX_NATS_CONNECT_TIMEOUT_SECONDS": "2",
    }


def clean(message: str) -> None:
    """assert_clean, allowing the names of AstraBox's own settings."""
    assert_clean(message.replace("ASTRABOX_NATS_", "ASTRABOX_"))


async def test_provider_console_and_doctor_work_over_mutual_tls(
    tls_server: NatsServer, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in tls_env(tls_server, pki).items():
        monkeypatch.setenv(name, value)
    handler = RecordingRunHandler()
    provider = NatsSchedulerProvider()  # AstraBox constructs it without arguments
    provider.configure(repository_backend=MongoBackend())
    await provider.start(handler)
    try:
        await provider.apply(Schedule("dep-tls", "n", "0 3 1 1 *", "UTC", True,
                                      RunPayload("t", "over tls")))
        run = await provider.enqueue(EnqueueRequest("dep-tls", Trigger.RUN_NOW))

        async def dispatched() -> bool:
            return (await provider.get_run(run.run_id)).state == RunState.DISPATCHED

        await eventually(dispatched, timeout=10)
        assert handler.session_of(run.run_id) is not None
    finally:
        await provider.stop()
    operator = NatsSettings.from_env({**tls_env(tls_server, pki, "operator")})
    nc = await connect(operator, "tls-console")
    try:
        assert nc.connected_url is not None and nc.connected_url.scheme == "tls"
        runs = await AdminClient(nc, timeout=2.0).list_runs("dep-tls")
        assert [r.run_id for r in runs.runs] == [run.run_id]
    finally:
        await nc.close()
    # the operator says the server syncs every write, as the docs ask: durability is OK
    told = NatsSettings.from_env({**tls_env(tls_server, pki, "operator"),
                                  "ASTRABOX_NATS_SERVER_SYNC_ALWAYS": "true"})
    report = await run_doctor(told, monitor_url=tls_server.http_url)
    assert report.get("connection").status == Status.OK
    assert report.get("durability").status == Status.OK


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"ASTRABOX_NATS_TLS_CERT": None, "ASTRABOX_NATS_TLS_KEY": None},
         "may require a client certificate"),
        ({"ASTRABOX_NATS_TLS_CA": "other"}, "certificate is not trusted"),
        ({"ASTRABOX_NATS_TLS_CA": None, "ASTRABOX_NATS_TLS_CERT": None,
          "ASTRABOX_NATS_TLS_KEY": None}, "certificate is not trusted"),
    ],
    ids=["no-client-certificate", "untrusted-server", "no-tls-settings"],
)
async def test_tls_misconfiguration_is_a_clean_configuration_error(
    tls_server: NatsServer, pki: Pki, change: dict[str, str | None], expected: str
) -> None:
    env = tls_env(tls_server, pki)
    for name, value in change.items():
        env.pop(name)
        if value == "other":
            env[name] = str(pki.other_ca)
    # A budget far above the answer's time: the refusal ends the attempt at once (0.3 s at
    # most idle), but without a client certificate the first try can meet a broken pipe
    # before TLS 1.3's alert, and only the retry 0.25 s later hears why; under the whole
    # suite's load 1 s was once too short ("no server answered").
    provider = NatsSchedulerProvider(
        NatsSettings.from_env(env).with_(**{**FAST, "connect_timeout": 15.0}))
    provider.configure(repository_backend=MongoBackend())
    with pytest.raises(SchedulerConfigurationError) as info:
        await provider.start(RecordingRunHandler())
    assert expected in str(info.value)
    clean(str(info.value))

"""Shared fixtures: anyio backend, real nats-server processes, failure reports.

Sections (append new ones at the end, e.g. provider fixtures):

1. async backend
2. failure reporting (server log tails attached to failed tests)
3. NATS servers: session server, private server, 3-node cluster, testcontainers (opt-in)
4. replica processes: the shared handler file and a replica set on it
5. the nats CLI (built with Go, cached) and jq, which the audit guide's commands use
6. the scenario on real minutes, started with the session so its minutes overlap the rest
7. the order of the tests, and the lane of the tests that wait for real minute boundaries
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Generator, Iterator, Mapping
from pathlib import Path

import pytest

from nats_scheduler.natsserver.process import NatsServer
from tests.harness.cluster import NatsCluster
from tests.harness.lane import MARKER as LANE_MARKER
from tests.harness.lane import Lane, LaneItem, in_lane, write_report
from tests.harness.minute_account import SharedScenario
from tests.harness.natscli import INSTALL_HINT as NATS_CLI_HINT
from tests.harness.natscli import VERSION as NATS_CLI_VERSION
from tests.harness.natscli import NatsCliUnavailable, ensure_nats_cli
from tests.harness.replicas import ReplicaSet, replica_set
from tests.harness.scenario import FAST_REPLICA, LEASE
from tests.harness.servers import (
    DockerUnavailable,
    testcontainers_nats,
    testcontainers_requested,
)
from tests.harness.shared_handler import SqliteRunHandler

# =========================================================================== 1. async backend


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """Tests marked ``@pytest.mark.anyio`` run on asyncio (nats-py needs asyncio)."""
    return "asyncio"


# =========================================================================== 2. failure reporting

_SERVER_FIXTURES = ("nats_server", "fresh_nats_server", "nats_cluster")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the log tail of every server a failed test used to its report."""
    report: pytest.TestReport = yield
    if report.failed and report.when in ("setup", "call"):
        funcargs = getattr(item, "funcargs", {})
        for name in _SERVER_FIXTURES:
            server = funcargs.get(name)
            if isinstance(server, NatsServer):
                report.sections.append((f"{name} log tail", server.log_tail(60)))
            elif isinstance(server, NatsCluster):
                report.sections.append((f"{name} log tails", server.log_tails(30)))
        replicas = funcargs.get("replicas")
        if isinstance(replicas, ReplicaSet):  # the fixture's own failure print never runs
            report.sections.append(("replica log tails", replicas.log_tails()))
    return report


# =========================================================================== 3. NATS servers


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One JetStream server for the whole session.

    Tests isolate themselves by a unique prefix (``unique_prefix()``) instead of a server
    each, which keeps the suite fast. Do not kill or restart it: use ``fresh_nats_server``.
    """
    with NatsServer(tmp_path_factory.mktemp("nats-session"), server_name="session") as server:
        yield server


@pytest.fixture
def nats_url(nats_server: NatsServer) -> str:
    """Client URL of the session server."""
    return nats_server.url


@pytest.fixture
def fresh_nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A private JetStream server for tests that kill, pause or restart it."""
    with NatsServer(tmp_path / "nats", server_name="fresh") as server:
        yield server


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    """A 3-node JetStream cluster on loopback (every node healthy, meta leader elected)."""
    with NatsCluster(tmp_path / "cluster") as cluster:
        yield cluster


@pytest.fixture
def nats_testcontainer() -> Iterator[str]:
    """Client URL of a JetStream nats-server in Docker (testcontainers).

    Opt-in with ``NATS_TESTCONTAINERS=1``; skips (never fails) without it or without a
    Docker engine. The binary-based fixtures above are the default everywhere.
    """
    if not testcontainers_requested():
        pytest.skip("testcontainers path is opt-in: set NATS_TESTCONTAINERS=1 (needs Docker)")
    cm = testcontainers_nats()
    try:
        url = cm.__enter__()
    except DockerUnavailable as exc:
        pytest.skip(f"NATS_TESTCONTAINERS=1 but Docker is unavailable: {exc}")
    try:
        yield url
    finally:
        cm.__exit__(None, None, None)


# =========================================================================== 4. replica processes
#
# ``replicas`` is a set of ``python -m tests.harness.replica`` processes on a fresh prefix of
# ``replica_url``, each with a ``SqliteRunHandler`` on ``handler``'s file, every one with the
# lease ``LEASE`` and the settings ``replica_settings``. A module whose replicas need other
# settings or another server overrides ``replica_settings`` or ``replica_url`` (a fixture of
# the same name in the module), not ``replicas`` itself, so every such set is made one way.


@pytest.fixture
def handler(tmp_path: Path) -> SqliteRunHandler:
    """The test's own view of the handler file the replicas share (steering and counting):
    Sessions are counted across processes the way AstraBox would count them."""
    return SqliteRunHandler(tmp_path / "handler.db", process="test")


@pytest.fixture
def replica_url(nats_url: str) -> str:
    """The server (or the cluster's comma-separated URLs) the ``replicas`` connect to."""
    return nats_url


@pytest.fixture
def replica_settings() -> Mapping[str, object]:
    """Settings of the ``replicas``: the scenarios' short retries and drains."""
    return FAST_REPLICA


@pytest.fixture
async def replicas(replica_url: str, tmp_path: Path, handler: SqliteRunHandler,
                   replica_settings: Mapping[str, object]) -> AsyncIterator[ReplicaSet]:
    """Replica processes on a fresh prefix; all stopped (or killed) afterwards."""
    async with replica_set(replica_url, tmp_path, handler.path, lease_seconds=LEASE,
                           settings=replica_settings) as rs:
        yield rs


# =========================================================================== 5. the nats CLI


def _required_tool(what: str, install: str) -> None:
    """Skip without ``what`` on a developer's machine; under CI (``CI=true``) fail instead:
    the tests that need it must run there."""
    message = f"{what} is not available: {install}"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI needs it: {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def nats_cli() -> Path:
    """The official ``nats`` CLI (tests/harness/natscli.py builds it once into a cache)."""
    try:
        return ensure_nats_cli()
    except NatsCliUnavailable as exc:
        _required_tool(f"the nats CLI {NATS_CLI_VERSION}", f"{exc} ({NATS_CLI_HINT})")
        raise  # unreachable: skip or fail raised


@pytest.fixture(scope="session")
def jq() -> str:
    """``jq``, which docs/audit.md pipes the CLI's JSON through."""
    found = shutil.which("jq")
    if found is None:
        _required_tool("jq", "install it (apt-get install jq)")
    assert found is not None
    return found


# =========================================================================== 6. real minutes
#
# The account of due times across real minute boundaries (``tests/harness/minute_account.py``)
# needs three and a half to four and a half minutes of wall time, mostly waiting for the
# minutes to pass. When its test is collected, the scenario starts as a child process as soon
# as collection ends, so those minutes overlap the rest of the suite; the test waits for its
# result. Under pytest-xdist every worker collects the test, and the first to claim the run's
# shared folder (beside the workers' own temporary folders) starts the one scenario; the test
# reads its result wherever it runs. The owner's session lets it end (or stops it by its PID
# when the run is interrupted). Sooner still, the xdist controller starts it when the run is
# configured, before the workers have even started (their collection takes 10 to 25 s), when
# the arguments name the test's file or a folder holding it and nothing narrows the
# selection; it stops it again if the workers did not collect the test after all.

MINUTES_TEST = "tests/test_whole_account_on_real_minutes.py"
_MINUTES = pytest.StashKey[SharedScenario]()


def _minutes_folder(config: pytest.Config) -> Path:
    """Shared by every process of one run: the run's temporary folder (xdist gives each
    worker a folder inside it)."""
    base = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    return (base.parent if hasattr(config, "workerinput") else base) / "minute-account"


def _controls_workers(config: pytest.Config) -> bool:
    """Whether this is the pytest-xdist controller of a run with workers."""
    return (not hasattr(config, "workerinput") and config.getoption("dist", "no") != "no"
            and bool(config.getoption("tx", None)))


def _named(config: pytest.Config, path: str) -> bool:
    """Whether the run's arguments name ``path`` or a folder holding it, with nothing that
    narrows the selection (``-k``, ``-m``, ``--lf``, ``--deselect``, collect-only)."""
    if (config.option.keyword or config.option.markexpr or config.getoption("lf", False)
            or config.getoption("deselect", None) or config.option.collectonly):
        return False
    base = (config.rootpath if config.args_source == pytest.Config.ArgsSource.TESTPATHS
            else config.invocation_params.dir)
    target = (config.rootpath / path).resolve()
    for arg in config.args:
        named = (base / arg.split("::")[0]).resolve()
        if named == target or named in target.parents:
            return True
    return False


@pytest.hookimpl(trylast=True)  # after the temporary folders are configured
def pytest_configure(config: pytest.Config) -> None:
    if _controls_workers(config) and _named(config, MINUTES_TEST):
        config.stash[_MINUTES] = SharedScenario(_minutes_folder(config))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    """In the controller: a scenario started for a test the workers did not collect ends."""
    config: pytest.Config = node.config  # type: ignore[attr-defined]
    scenario = config.stash.get(_MINUTES, None)
    if scenario is not None and not any(i.startswith(MINUTES_TEST) for i in ids):
        scenario.finish(interrupted=True)


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(item.nodeid.startswith(MINUTES_TEST) for item in session.items):
        session.config.stash[_MINUTES] = SharedScenario(_minutes_folder(session.config))
    _start_lane(session)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    scenario = session.config.stash.get(_MINUTES, None)
    if scenario is not None:
        scenario.finish(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
    _finish_lane(session, exitstatus)


@pytest.fixture(scope="session")
def real_minutes(request: pytest.FixtureRequest) -> dict[str, object]:
    """What the real-minutes scenario saw (it runs in the background from the start)."""
    scenario = request.config.stash.get(_MINUTES, None)
    if scenario is None:  # collected some other way: start it now
        scenario = request.config.stash[_MINUTES] = SharedScenario(
            _minutes_folder(request.config))
    return scenario.result()


# =========================================================================== 7. order and lane
#
# Tests marked ``wall_clock`` wait on real time with little CPU (a real minute boundary, the
# provider's timers): they run in one more pytest run beside the workers
# (``tests/harness/lane.py``), started at the end of collection like the scenario above,
# and each worker holds a ``LaneItem`` in their place that reports the lane's outcome; only
# when other tests are collected too (alone, they run in-process).
# The order given to the workers: the ``slow`` tests first (so no long one starts last), the
# lane's items and the real-minutes test last (their results come from the background).

_LANE = pytest.StashKey[Lane]()


def _lane_folder(config: pytest.Config) -> Path:
    return _minutes_folder(config).with_name("wall-clock-lane")


def _runs_late(item: pytest.Item) -> bool:
    return isinstance(item, LaneItem) or item.nodeid.startswith(MINUTES_TEST)


@pytest.hookimpl(trylast=True)  # after -k/-m deselected what they deselect
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not in_lane() and not all(i.get_closest_marker(LANE_MARKER) for i in items):
        items[:] = [LaneItem.of(i, _LANE) if i.get_closest_marker(LANE_MARKER) else i
                    for i in items]
    items.sort(key=lambda i: (_runs_late(i), i.get_closest_marker("slow") is None))


def _start_lane(session: pytest.Session) -> None:
    originals = [i.original for i in session.items if isinstance(i, LaneItem)]
    if originals:
        session.config.stash[_LANE] = Lane(_lane_folder(session.config), originals)


def _finish_lane(session: pytest.Session, exitstatus: int) -> None:
    lane = session.config.stash.get(_LANE, None)
    if lane is not None:  # stopped early too (-x, --maxfail): nobody waits for the lane
        lane.finish(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED
                    or bool(session.shouldstop))


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if in_lane():
        write_report(report)

"""A rolling upgrade from the previous release (commit ``607dad8``) to this one.

AstraBox upgrades its replicas one at a time, so for a while a replica of each release
fires the same Schedules against one store. The previous release runs as it shipped: built
from this repository's history into a virtual environment of its own (cached under pytest's
cache directory, keyed by the commit), driven through its own harness
(``tests/harness/old_release.py``). The scenario is ``tests/harness/upgrade.py``; this test
judges one real minute boundary of it (``bench/rolling_upgrade.py --minutes 3`` runs three):

1. the store the previous release wrote (Schedules, the history, an open Run) is read by
   this release, which lists the Runs as written and resumes the open Run;
2. while one replica of each release runs, every every-minute Schedule gets exactly one
   Run for the boundary, DISPATCHED (FAILED only where the handler refuses), each release
   creating its share through its own write path, neither skipping the other's events;
3. the invariant checker finds nothing in the whole history.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from tests.harness.old_release import (
    PREVIOUS_RELEASE,
    ReleaseMissing,
    install_release,
    release_commit,
)
from tests.harness.upgrade import rolling_upgrade

pytestmark = pytest.mark.anyio


def test_a_missing_previous_release_fails_saying_so(tmp_path: Path) -> None:
    """A clone without the release's commit (a shallow one) is told so, not skipped."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    with pytest.raises(ReleaseMissing, match=f"commit {PREVIOUS_RELEASE}.*shallow clone"):
        release_commit(PREVIOUS_RELEASE, repo=tmp_path)


@pytest.mark.wall_clock(boundary=True)
@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_rolling_upgrade_from_the_previous_release_fires_each_due_time_once(
        nats_url: str, tmp_path: Path, pytestconfig: pytest.Config,
        tmp_path_factory: pytest.TempPathFactory) -> None:
    # pytest's cache keeps the build between runs; without it (-p no:cacheprovider) the
    # previous release is built in this run's temporary directory.
    pytest_cache = getattr(pytestconfig, "cache", None)
    cache = (pytest_cache.mkdir("previous-release") if pytest_cache is not None
             else tmp_path_factory.mktemp("previous-release"))
    try:
        release = await asyncio.to_thread(install_release, PREVIOUS_RELEASE, cache)
    except ReleaseMissing as exc:
        pytest.fail(str(exc), pytrace=False)

    outcome = await rolling_upgrade(nats_url, tmp_path, release, boundaries=1)

    assert not outcome.old_code_problems(), outcome.old_code_problems()
    assert not outcome.read_problems(), outcome.read_problems()
    assert not outcome.firing_problems(), outcome.firing_problems()
    assert outcome.report is not None and outcome.report.ok, outcome.report

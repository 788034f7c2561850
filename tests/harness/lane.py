"""The wall-clock lane: tests whose time is the wall clock's, run beside the suite's workers.

A test marked ``wall_clock`` spends most of its time waiting on real time with little CPU:
``wall_clock(boundary=True)`` for the next real minute boundary (up to a minute), plain
``wall_clock`` for the provider's own timers (a settle window, leases running out, an
election, a connect time-out). Under ``pytest -n 2`` each such wait holds one of the two
workers. Instead, the first process of the run to claim the lane's folder (shared by the
run's workers, as for the real-minutes scenario) starts one more pytest run,
``python -m pytest -n N NODEID ...``, at the end of collection: it runs every such test
whole, side by side (``LANE_WORKERS`` processes, each with its own session server), while
the workers run the rest. The boundary tests come first, one per lane process (``order``),
so that their waits for a boundary overlap: one after another, each would start just after
the boundary the one before it ended on and wait almost a whole minute.

In the workers each such test is a :class:`LaneItem` in the same place of the collection,
with the same node ID, which waits for that test's reports from the lane
(``results.jsonl``, one JSON line per phase) and fails with the lane's failure text, skips
with its reason, or passes: nothing is judged twice or not at all. These items are put last
in the collection, so by the time a worker reaches them the lane has usually reported them.

The lane process itself (``LANE_ENV`` set) runs the tests it was given as ordinary tests
and its controlling process writes their reports (``write_report``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

LANE_ENV = "NATS_SCHED_WALL_CLOCK_LANE"
"""Set in the lane process: the file its reports go to."""

MARKER = "wall_clock"

LANE_WORKERS = 3
"""Processes of the lane. Three of the six boundary tests share the first boundary, the
other three the next; more processes crowd the two cores while the workers are busy too:
with four, and the 3-node cluster tests in the lane, a partition test and a worker's lease
test ran out of their time under the load (the cluster tests run in the workers now)."""

LANE_SECONDS = 600.0
"""The longest the lane may take (its tests take about a minute and a half together)."""


def boundary(item: pytest.Item) -> bool:
    marker = item.get_closest_marker(MARKER)
    return marker is not None and bool(marker.kwargs.get("boundary"))


def order(items: list[pytest.Item]) -> list[str]:
    """The lane's node IDs: each boundary test followed by a timer test, so that xdist's
    first chunks (two tests per process) give each process one boundary test to start with;
    the rest after them, to whichever process is free."""
    boundaries = [i.nodeid for i in items if boundary(i)]
    timers = [i.nodeid for i in items if not boundary(i)]
    paired: list[str] = []
    for index, nodeid in enumerate(boundaries):
        paired.append(nodeid)
        if index < len(timers):
            paired.append(timers[index])
    return paired + timers[len(boundaries):]


def in_lane() -> bool:
    return bool(os.environ.get(LANE_ENV))


def write_report(report: pytest.TestReport) -> None:
    """In the lane's (controlling) process: append one phase's outcome to the results."""
    out = os.environ.get(LANE_ENV)
    if not out or os.environ.get("PYTEST_XDIST_WORKER"):  # the lane's controller writes,
        return  # one line at a time, every report its workers send
    line = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
            "duration": report.duration,
            "longrepr": report.longreprtext if report.longrepr is not None else "",
            # the captured output and server logs only of what failed: a result file, not
            # the lane's whole output
            "sections": ([[title, text] for title, text in report.sections]
                         if report.failed else [])}
    if report.skipped and isinstance(report.longrepr, tuple):
        line["longrepr"] = str(report.longrepr[2])
    with open(out, "a", encoding="utf-8") as sink:
        sink.write(json.dumps(line) + "\n")


class Lane:
    """The lane of one run: started by the first process to create ``folder``; every
    process reads its results file."""

    def __init__(self, folder: Path, items: list[pytest.Item]) -> None:
        from .replicas import REPO_ROOT

        self.folder = folder
        self.results = folder / "results.jsonl"
        self.log = folder / "log.txt"
        self.proc: subprocess.Popen[bytes] | None = None
        try:
            folder.mkdir()
        except FileExistsError:
            return
        self.results.touch()
        nodeids = order(items)
        env = {**os.environ, LANE_ENV: str(self.results)}
        env.pop("PYTEST_XDIST_WORKER", None)
        env.pop("PYTEST_XDIST_WORKER_COUNT", None)
        with self.log.open("ab") as sink:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pytest", "-n", str(min(len(nodeids), LANE_WORKERS)),
                 "--dist", "load", "-p", "no:cacheprovider",
                 "-q", "--basetemp", str(folder / "tmp"), *nodeids],
                cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=sink,
                stderr=subprocess.STDOUT)

    def _lines(self) -> list[dict[str, Any]]:
        """Every complete line of the results (a line being written is left for later)."""
        try:
            text = self.results.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        complete = text[: text.rfind("\n") + 1]
        return [json.loads(line) for line in complete.splitlines() if line]

    def reports(self, nodeid: str) -> list[dict[str, Any]]:
        return [line for line in self._lines() if line["nodeid"] == nodeid]

    def ended(self) -> int | None:
        """The lane's exit code once it has ended, else None: its owner sees the process
        end and writes it to the results, where the other processes of the run read it."""
        if self.proc is not None:
            code = self.proc.poll()
            if code is not None:
                self._write_end(code)
            return code
        ends = [line["exit"] for line in self._lines() if line["when"] == "ended"]
        return ends[0] if ends else None

    def _write_end(self, code: int) -> None:
        if not any(line["when"] == "ended" for line in self._lines()):
            with open(self.results, "a", encoding="utf-8") as sink:
                sink.write(json.dumps({"nodeid": "", "when": "ended", "exit": code}) + "\n")

    def wait(self, nodeid: str, timeout: float = LANE_SECONDS) -> list[dict[str, Any]]:
        """The test's reports once its teardown is reported (polled, with a deadline)."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.reports(nodeid)
            if any(r["when"] == "teardown" for r in found):
                return found
            code = self.ended()
            if code is not None:  # its last lines are written before it exits
                found = self.reports(nodeid)
                if any(r["when"] == "teardown" for r in found):
                    return found
                raise AssertionError(f"the wall-clock lane ended (exit {code}) without "
                                     f"reporting {nodeid}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no report of {nodeid} from the wall-clock lane in "
                                     f"{timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self) -> str:
        with contextlib.suppress(FileNotFoundError):
            return self.log.read_text(errors="replace")[-4000:]
        return ""

    def finish(self, interrupted: bool) -> None:
        """At the end of the owner's session: let the lane end (other workers may still wait
        for it) unless the run was interrupted or stopped early; then interrupt it as Ctrl-C
        would (its tests tear down), by its PID, and kill it if it does not end."""
        if self.proc is None:
            return
        if not interrupted:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(LANE_SECONDS)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._write_end(self.proc.returncode)


class LaneFailure(AssertionError):
    """A test that failed in the wall-clock lane (its report's text follows)."""


class LaneItem(pytest.Item):
    """In a worker: the result of a ``wall_clock`` test that ran in the lane."""

    def __init__(self, *, original: pytest.Item, lane_key: pytest.StashKey[Lane],
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.original = original
        self.lane_key = lane_key
        # the wait for the lane, not the test's own time, bounds this item
        self.own_markers = [pytest.mark.timeout(LANE_SECONDS + 60).mark,
                            *original.own_markers]
        self.keywords.update(original.keywords)

    @classmethod
    def of(cls, item: pytest.Item, lane_key: pytest.StashKey[Lane]) -> LaneItem:
        assert item.parent is not None
        proxy: LaneItem = cls.from_parent(item.parent, name=item.name, original=item,
                                          lane_key=lane_key)
        assert proxy.nodeid == item.nodeid, (proxy.nodeid, item.nodeid)
        return proxy

    def runtest(self) -> None:
        lane = self.config.stash[self.lane_key]
        reports = lane.wait(self.nodeid)
        for title, text in (s for r in reports for s in r["sections"]):
            self.add_report_section("call", f"in the lane: {title}", text)
        failed = [r for r in reports if r["outcome"] == "failed"]
        if failed:
            raise LaneFailure("\n\n".join(
                f"in the wall-clock lane, {r['when']} failed:\n{r['longrepr']}"
                for r in failed))
        skipped = [r for r in reports if r["outcome"] == "skipped"]
        if skipped:
            pytest.skip(f"in the wall-clock lane: {skipped[0]['longrepr']}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, LaneFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)  # type: ignore[no-any-return]

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.original.reportinfo()

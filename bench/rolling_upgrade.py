"""A rolling upgrade from the previous release (commit 607dad8) to this one, minutes long.

    .venv/bin/python bench/rolling_upgrade.py --minutes 3 [--schedules 16] [--cache-dir DIR]

The scenario of ``tests/test_rolling_upgrade.py`` (``tests/harness/upgrade.py``, imported,
not copied), on a private nats-server, with ``--minutes`` real minute boundaries fired while
one replica of each release runs (the test judges one): the previous release, installed
from this repository's history into its own virtual environment (built once under
``--cache-dir``, by default pytest's cache directory, which the test fills too), writes the
store with two replicas; one is replaced by this release, which reads what the previous one
wrote; the two releases fire ``--schedules`` every-minute Schedules (one refused by the
handler) for ``--minutes`` boundaries; then the other is replaced, the open Run the previous
release left is resumed by this one, and the invariant checker judges the whole history.

Printed: where the previous release's code came from, each step's time, what this release
read of the previous one's store, per boundary the Runs per Schedule, who created them, their
states and how late each release stored them, the events each release writes per Run, the
events either release skipped, and the checker's verdict. The LAST line is exactly
``rolling upgrade: boundaries=<n> runs=<n> problems=<n> violations=<n>``; the exit status is
1 when there is a problem or a violation.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections import Counter
from pathlib import Path

# Run as `python bench/x.py`: sys.path[0] is bench/, so add the repo root for tests.harness.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nats_scheduler.natsserver.process import NatsServer
from tests.harness.old_release import PREVIOUS_RELEASE, install_release
from tests.harness.replicas import REPO_ROOT
from tests.harness.trails import Boundary
from tests.harness.upgrade import Outcome, rolling_upgrade

DEFAULT_CACHE = REPO_ROOT / ".pytest_cache" / "d" / "previous-release"
"""Where ``pytest`` keeps the test's build of the previous release (``cache.mkdir``)."""


def lateness(boundary: Boundary, creators: set[str]) -> str:
    figures = boundary.lateness(creators)
    return "-" if figures is None else f"{figures[0]:.3f}/{figures[1]:.3f} s"


def boundary_line(outcome: Outcome, boundary: Boundary) -> str:
    counts = Counter(boundary.per_deployment().values())
    per = ", ".join(f"{n} Run(s): {k}" for n, k in sorted(counts.items()))
    creators = ", ".join(f"{c} {n}" for c, n in sorted(boundary.creators().items()))
    states = ", ".join(f"{s} {n}" for s, n in sorted(boundary.states().items()))
    return (f"  {boundary.due:%H:%M}Z  {len(boundary.runs)} Runs; per Schedule: {per}; "
            f"created by {creators}; {states}; stored after the due time (p50/max): "
            f"previous {lateness(boundary, outcome.old)}, this {lateness(boundary, outcome.new)}")


def write_paths(outcome: Outcome) -> list[str]:
    """The event sequences each release stored for the Runs it created at the boundaries."""
    seen: Counter[tuple[str, tuple[str, ...]]] = Counter()
    for due in outcome.boundaries:
        for trail in outcome.boundary(due).runs:
            release = "previous" if trail.creator in outcome.old else "this"
            seen[(f"{release} (schema {trail.schema})", trail.types)] += 1
    return [f"  {release}: {' -> '.join(types)}  x{n}"
            for (release, types), n in sorted(seen.items())]


def report(outcome: Outcome) -> int:
    """Print the figures and the verdict; the number of problems and violations."""
    release = outcome.release
    built = ("reused" if release.build_seconds is None
             else f"built in {release.build_seconds:.1f} s")
    print(f"previous release {release.commit[:12]} ({built}): nats_scheduler from "
          f"{outcome.imported['nats_scheduler']}, harness {outcome.imported['replica']}")
    print("steps: " + "; ".join(f"{step} {s:.1f} s" for step, s in outcome.seconds.items()))
    print(f"read by this release: {len(outcome.listed)} of {len(outcome.written)} history "
          f"Runs listed as written; the open Run read {outcome.open_run.get('state')}, "
          f"called for by {' -> '.join(outcome.open_holders)}")
    print(f"boundaries fired by {sorted(outcome.old)} (previous) and {sorted(outcome.new)} "
          f"(this), {len(outcome.deployments)} Schedules, refused by the handler: "
          f"{sorted(outcome.refusals)}")
    print("tickers after the last boundary: " + "; ".join(
        f"{identity} fired {status['fired']} due times itself and found "
        f"{status['left_to_owner']} fired by their owner when the grace ended"
        for identity, status in outcome.statuses.items()))
    for due in outcome.boundaries:
        print(boundary_line(outcome, outcome.boundary(due)))
    print("events per Run, by the release that created it:")
    print("\n".join(write_paths(outcome)))
    skipped = {i: sum(f["poisoned"] for f in fs) for i, fs in outcome.followers.items()}
    print(f"events skipped by each replica's projections: {skipped}")
    problems = (outcome.old_code_problems() + outcome.read_problems()
                + outcome.firing_problems())
    for problem in problems:
        print(f"PROBLEM {problem}")
    assert outcome.report is not None
    print(f"invariant checker: {outcome.report.text()}")
    runs = sum(len(outcome.boundary(due).runs) for due in outcome.boundaries)
    violations = len(outcome.report.violations)
    print(f"rolling upgrade: boundaries={len(outcome.boundaries)} runs={runs} "
          f"problems={len(problems)} violations={violations}")
    return len(problems) + violations


async def main(args: argparse.Namespace) -> int:
    release = await asyncio.to_thread(install_release, PREVIOUS_RELEASE, args.cache_dir)
    with tempfile.TemporaryDirectory() as tmp, NatsServer(Path(tmp) / "nats").start() as server:
        outcome = await rolling_upgrade(server.url, Path(tmp), release,
                                        boundaries=args.minutes, schedules=args.schedules)
    return report(outcome)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=int, default=3,
                        help="minute boundaries fired by one replica of each release")
    parser.add_argument("--schedules", type=int, default=16,
                        help="every-minute Schedules (the last one refused by the handler)")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE,
                        help="where the previous release's venv is built once (by commit)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(1 if asyncio.run(main(parse())) else 0)

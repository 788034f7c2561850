"""``python -m nats_scheduler.simulation``: run seeds of the deterministic simulation.

    python -m nats_scheduler.simulation --seeds 100                 # seeds 0..99
    python -m nats_scheduler.simulation --seed 4711 --seeds 1 --trace
    python -m nats_scheduler.simulation --list-mutations
    python -m nats_scheduler.simulation --mutation lease-without-cas --seeds 20
    python -m nats_scheduler.simulation --seeds 1000 --jobs 2        # two worker processes

Each seed runs a cluster of ``--replicas`` real provider runtimes on the in-memory store for
``--hours`` simulated hours (:mod:`.scenario`) and ends with the invariant checker. The last
line printed is the summary::

    simulation: seeds=N simulated_hours=H runs=R faults=F foreign=M violations=V wall_seconds=W

``foreign`` counts the foreign messages written (:mod:`.foreign_faults`; ``--no-foreign``
leaves them out, as the seeds that found a bug ran): the checker named every one still
stored, or V counts the ones it missed.

Exit 1 when V > 0, after naming each failing seed with the command that replays it.
``--trace`` prints every simulated event first; a seed's trace is the same, byte for byte,
every time (string hashing is fixed: ``PYTHONHASHSEED`` is set before anything runs).

``--jobs N`` (default: the CPUs this process may use) runs the seeds in N worker processes,
each seed alone in its own fresh loop as in one process; what they print comes in seed
order, and the same as one process prints, byte for byte (the summary's ``wall_seconds``
aside).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .scenario import Outcome


def _fixed_hashing() -> None:
    """Run again with ``PYTHONHASHSEED=0`` unless it is set: set iteration order must not
    change between runs of one seed."""
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "nats_scheduler.simulation",
                                  *sys.argv[1:]])


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def _outcomes(seeds: range, jobs: int, **kwargs: object) -> Iterator[Outcome]:
    """Each seed's :class:`~.scenario.Outcome`, in seed order: here, or from ``jobs`` worker
    processes (forked: they inherit this process's fixed string hashing), each seed as soon
    as it and every seed before it are done."""
    from .run import run_seed

    one = functools.partial(run_seed, **kwargs)  # type: ignore[arg-type]
    if jobs <= 1 or len(seeds) <= 1:
        yield from map(one, seeds)
        return
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(min(jobs, len(seeds)),
                                                mp_context=context) as pool:
        yield from pool.map(one, seeds)


def main(argv: list[str] | None = None) -> int:
    from .mutations import MUTATIONS

    parser = argparse.ArgumentParser(prog="python -m nats_scheduler.simulation")
    parser.add_argument("--seeds", type=int, default=20, help="how many seeds (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="the first seed (default 0)")
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--hours", type=float, default=1.0, help="simulated hours per seed")
    parser.add_argument("--schedules", type=int, default=100)
    parser.add_argument("--trace", action="store_true", help="print every simulated event")
    parser.add_argument("--mutation", choices=sorted(MUTATIONS), default=None,
                        help="switch a known bug on (the simulation must catch it)")
    parser.add_argument("--list-mutations", action="store_true")
    parser.add_argument("--no-foreign", action="store_true",
                        help="write no foreign messages (a seed's run as before that fault)")
    parser.add_argument("--jobs", type=int, default=_cpus(),
                        help="worker processes running seeds at once (default: the CPUs, "
                             "%(default)s here); 1: all in this process")
    args = parser.parse_args(argv)
    if args.list_mutations:
        for name, mutation in sorted(MUTATIONS.items()):
            print(f"{name}\t{mutation.description}")
        return 0
    began = time.perf_counter()
    totals = {"hours": 0.0, "runs": 0, "faults": 0, "foreign": 0, "violations": 0}
    failing: list[int] = []
    seeds = range(args.seed, args.seed + args.seeds)
    outcomes = _outcomes(seeds, args.jobs, replicas=args.replicas, hours=args.hours,
                         schedules=args.schedules, trace=args.trace,
                         mutation=args.mutation,
                         foreign=not args.no_foreign)  # a crash is the seed's violation
    for seed, outcome in zip(seeds, outcomes, strict=True):
        if args.trace:
            print("\n".join(outcome.trace), flush=True)
        totals["hours"] += outcome.simulated_hours
        totals["runs"] += outcome.runs
        totals["faults"] += outcome.faults
        totals["foreign"] += outcome.foreign
        totals["violations"] += len(outcome.violations)
        if outcome.violations:
            failing.append(seed)
            mutation = f" --mutation {args.mutation}" if args.mutation else ""
            mutation += " --no-foreign" if args.no_foreign else ""
            print(f"seed {seed}: {len(outcome.violations)} violations, replay: python -m "
                  f"nats_scheduler.simulation --seed {seed} --seeds 1 --replicas "
                  f"{args.replicas} --hours {args.hours:g} --schedules {args.schedules}"
                  f"{mutation} --trace", flush=True)
            for violation in outcome.violations[:10]:
                print(f"  {violation.line()}", flush=True)
    wall = time.perf_counter() - began
    print(f"simulation: seeds={args.seeds} simulated_hours={totals['hours']:g} "
          f"runs={totals['runs']} faults={totals['faults']} foreign={totals['foreign']} "
          f"violations={totals['violations']} wall_seconds={wall:.1f}", flush=True)
    return 1 if totals["violations"] else 0


if __name__ == "__main__":
    _fixed_hashing()
    raise SystemExit(main())

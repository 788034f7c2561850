"""The deterministic simulation (``python -m nats_scheduler.simulation``): whole clusters of
the real runtime on the in-memory store and virtual time, every fault drawn from a seed.

CI runs a fixed set of seeds and must find no violation; a failing seed is printed with the
command that replays it. The simulation proves it can see what it claims to: every known bug
it can switch on (``--mutation``) is caught. And a seed is a replay: the same seed gives the
same trace, byte for byte.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

import pytest

from nats_scheduler.simulation import __main__ as command
from nats_scheduler.simulation import run
from nats_scheduler.simulation.mutations import MUTATIONS
from nats_scheduler.simulation.run import run_seed
from nats_scheduler.simulation.scenario import Outcome

OUTAGE_TAKEOVER = ("a store outage longer than a lease: the first replica to read the lease "
                   "after it took the Run from its live holder (now a gap in a reader's "
                   "reads restarts the count: ports/leases.py, expired)")
FOUND = {
    622: OUTAGE_TAKEOVER,
    817: OUTAGE_TAKEOVER,
    893: "a page of the history read while the store was down failed as the store's own "
         "error instead of SchedulerUnavailable (memory/history.py: reads retried)",
    307: "a replica starting at a minute boundary, its host clock stepped, closed the lease "
         "key a live replica had just opened for a Run it was storing (the start-up's clean-up "
         "of keys never stored judged their expiry by its own clock): another replica took "
         "the Run from its live holder",
    914: OUTAGE_TAKEOVER,
    996: OUTAGE_TAKEOVER,
}
"""Seeds that found a bug, each its regression test (docs/architecture.md, section 9)."""

CI_SEEDS = range(0, 12)
"""The seeds every test run simulates (about 1.5 s of CPU each on the development machine)."""
HOURS = 0.5


def simulate(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nats_scheduler.simulation", *args],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONHASHSEED": "0"})


@pytest.mark.parametrize("seed", CI_SEEDS)
def test_a_seed_of_the_simulation_keeps_every_promise(seed: int) -> None:
    outcome = run_seed(seed, hours=HOURS)
    assert outcome.runs > 100 and outcome.faults > 0 and outcome.foreign > 0
    assert not outcome.violations, (
        f"seed {seed}: " + "; ".join(v.line() for v in outcome.violations[:5])
        + f" (replay: python -m nats_scheduler.simulation --seed {seed} --seeds 1 "
        f"--hours {HOURS} --trace)")


@pytest.mark.parametrize("seed", sorted(FOUND))
def test_a_seed_that_found_a_bug_keeps_every_promise(seed: int) -> None:
    outcome = run_seed(seed, hours=1.0, foreign=False)  # the run that found it
    assert not outcome.violations, FOUND[seed] + ": " + "; ".join(
        v.line() for v in outcome.violations[:5])


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_every_known_bug_switched_on_is_caught(name: str) -> None:
    """Within the command's default seed count (20); most are caught by the first seed."""
    for seed in range(20):
        outcome = run_seed(seed, hours=HOURS, mutation=name)
        if outcome.violations:
            return
    pytest.fail(f"mutation {name} was not caught in 20 seeds")


def test_a_seed_replays_its_trace_byte_for_byte() -> None:
    first = simulate("--seed", "7", "--seeds", "1", "--hours", "0.25", "--trace")
    second = simulate("--seed", "7", "--seeds", "1", "--hours", "0.25", "--trace")
    assert first.returncode == second.returncode == 0, first.stderr[-2000:]
    lines, again = first.stdout.splitlines(), second.stdout.splitlines()
    assert len(lines) > 100
    assert lines[:-1] == again[:-1]  # the last line says how long it took
    assert lines[-1].startswith("simulation: seeds=1 simulated_hours=0.25 runs=")
    assert " violations=0 " in lines[-1]


def test_seeds_run_by_worker_processes_print_what_one_process_prints() -> None:
    args = ("--seed", "5", "--seeds", "3", "--hours", "0.25", "--trace")
    alone, shared = simulate(*args, "--jobs", "1"), simulate(*args, "--jobs", "2")
    assert alone.returncode == shared.returncode == 0, shared.stderr[-2000:]
    lines, again = alone.stdout.splitlines(), shared.stdout.splitlines()
    assert len(lines) > 300
    assert lines[:-1] == again[:-1]
    assert lines[-1].split(" wall_seconds=")[0] == again[-1].split(" wall_seconds=")[0]
    failing = simulate("--seeds", "2", "--hours", "0.25", "--mutation", "lease-without-cas",
                       "--jobs", "2")
    assert failing.returncode == 1
    named = [line.split(":")[0] for line in failing.stdout.splitlines()
             if line.startswith("seed ")]
    assert named == ["seed 0", "seed 1"]


_FORK = multiprocessing.get_context("fork")
_BOTH = _FORK.Barrier(2, timeout=60)
_SEED_1_DONE = _FORK.Event()


def _fake_seed(seed: int, **kwargs: object) -> Outcome:
    """A seed in a worker (forked: it shares the barrier and the event): its process ID as
    its Runs."""
    if seed < 2:
        _BOTH.wait()
    if seed == 0:
        assert _SEED_1_DONE.wait(timeout=60)
    if seed == 1:
        _SEED_1_DONE.set()
    return Outcome(seed, 1.0, os.getpid(), 0, [])


def test_worker_processes_run_seeds_at_once_and_hand_them_back_in_seed_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Both workers are inside a seed at the same moment (a barrier of two), and seed 0 ends
    only after seed 1 has: the outcomes still come in seed order."""
    monkeypatch.setattr(run, "run_seed", _fake_seed)
    outcomes = list(command._outcomes(range(4), 2, hours=1.0))
    assert [o.seed for o in outcomes] == [0, 1, 2, 3]
    assert os.getpid() not in {o.runs for o in outcomes}
    assert len({outcomes[0].runs, outcomes[1].runs}) == 2


def test_the_command_names_a_failing_seed_and_how_to_replay_it() -> None:
    # A mutation every seed catches (dozens of violations each): which seeds catch a rarer
    # one moves with every change to the store operations a replica makes.
    done = simulate("--seeds", "1", "--hours", "0.25", "--mutation", "lease-without-cas")
    assert done.returncode == 1
    assert ("seed 0: " in done.stdout and "replay: python -m nats_scheduler.simulation "
            "--seed 0 --seeds 1" in done.stdout and "--mutation lease-without-cas --trace"
            in done.stdout)
    summary = done.stdout.splitlines()[-1]
    assert summary.startswith("simulation: seeds=1 ") and " violations=0 " not in summary
    listed = simulate("--list-mutations")
    assert sorted(line.split("\t")[0] for line in listed.stdout.splitlines()) == sorted(
        MUTATIONS)

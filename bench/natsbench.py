"""``nats bench``, the NATS maintainers' own benchmark, as a same-run reference.

Our own references (bench/firing.py's gathered publishes, ``publish_async`` and atomic
batches; bench/held.py's and bench/capacity.py's publish loops) are nats-py loops: they say
what a Python client gets from the server, which is what the provider can hope for. The
reference a NATS user trusts is the official CLI's ``nats bench js pub``, a Go client on the
same server in the same run. Three of its modes, each with its own stream of the same
storage and replicas as the provider's:

* ``js pub sync`` with ``--clients`` concurrent publishers, each awaiting every
  acknowledgement (what ``CALLERS`` callers of ``enqueue`` or of ``apply`` do);
* ``js pub async`` (``--batch 500`` outstanding acknowledgements): the asynchronous
  ceiling a single publisher reaches;
* ``js pub atomic`` (``--batch`` messages per ADR-50 atomic batch): the batched ceiling,
  which under ``sync_interval: always`` pays one sync per batch, as the provider's batches do.

The CLI comes from ``tests/harness/natscli.py`` (built with Go into a cache folder on first
use); without it :func:`nats_bench` says why and returns None, and the benchmark prints its
own references alone. Run directly to print the three figures for a server:
``.venv/bin/python bench/natsbench.py --url nats://127.0.0.1:4222``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests.harness

from tests.harness.natscli import VERSION, NatsCliUnavailable, ensure_nats_cli

ASYNC_BATCH = 500
"""Outstanding acknowledgements of ``js pub async`` (the CLI's default)."""
_RATE = re.compile(r"publisher (?:aggregated )?stats: ([\d,]+) msgs/sec")
_STREAM = "NATSBENCH_REF"


@dataclass(frozen=True)
class NatsBench:
    """Acknowledged messages/s ``nats bench js pub`` measured, per mode."""

    sync: float
    """``js pub sync`` with ``clients`` publishers, each awaiting every acknowledgement."""
    async_: float
    """``js pub async``, one publisher, ``ASYNC_BATCH`` acknowledgements outstanding."""
    atomic: float
    """``js pub atomic``, one publisher, ``atomic_batch`` messages per atomic batch."""
    clients: int
    atomic_batch: int
    messages: int
    size: int

    def line(self) -> str:
        """The reference as printed beside the benchmark's own."""
        return (f"nats bench (natscli {VERSION}, Go client), {self.messages:,} messages of "
                f"{self.size} B: js pub sync ({self.clients} clients) {self.sync:,.0f}/s, "
                f"js pub async (batch {ASYNC_BATCH}) {self.async_:,.0f}/s, "
                f"js pub atomic (batch {self.atomic_batch}) {self.atomic:,.0f}/s")

    def ratios(self, rate: float) -> str:
        """``rate`` as ratios to the three modes."""
        return (f"{rate / self.sync:.3f}x nats bench sync, {rate / self.async_:.3f}x async, "
                f"{rate / self.atomic:.3f}x atomic")


def _one(cli: Path, url: str, mode: list[str], *, messages: int, size: int,
         replicas: int) -> float:
    """One ``nats bench js pub`` run on a fresh stream (removed afterwards)."""
    server = ["--server", url]
    command = [str(cli), *server, "bench", "js", "pub", *mode, "natsbench.ref",
               "--stream", _STREAM, "--create", "--purge", "--msgs", str(messages),
               "--size", f"{size}B", "--replicas", str(replicas), "--no-progress"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                              check=False)
    finally:
        subprocess.run([str(cli), *server, "stream", "rm", _STREAM, "-f"],
                       capture_output=True, timeout=60, check=False)
    found = _RATE.search(done.stdout + done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"`nats bench js pub {mode[0]}` failed: "
                           f"{(done.stderr or done.stdout)[-500:]}")
    return float(found.group(1).replace(",", ""))


def measure(url: str, *, messages: int, size: int, clients: int, atomic_batch: int,
            replicas: int = 1) -> NatsBench:
    """The three modes on the server(s) at ``url`` (comma-separated for a cluster)."""
    cli = ensure_nats_cli()
    common = {"messages": messages, "size": size, "replicas": replicas}
    sync = _one(cli, url, ["sync", "--clients", str(clients)], **common)
    async_ = _one(cli, url, ["async", "--batch", str(ASYNC_BATCH)], **common)
    atomic = _one(cli, url, ["atomic", "--batch", str(atomic_batch)], **common)
    return NatsBench(sync, async_, atomic, clients, atomic_batch, messages, size)


async def nats_bench(url: str, *, messages: int, size: int, clients: int, atomic_batch: int,
                     replicas: int = 1) -> NatsBench | None:
    """:func:`measure` off the event loop; None (with the reason printed) without the CLI."""
    try:
        return await asyncio.to_thread(measure, url, messages=messages, size=size,
                                       clients=clients, atomic_batch=atomic_batch,
                                       replicas=replicas)
    except (NatsCliUnavailable, RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"reference (nats bench): not measured: {exc}", flush=True)
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=600)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--atomic-batch", type=int, default=100)
    args = parser.parse_args()
    print(measure(args.url, messages=args.messages, size=args.size, clients=args.clients,
                  atomic_batch=args.atomic_batch).line())
    return 0


if __name__ == "__main__":
    sys.exit(main())

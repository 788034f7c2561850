"""A replica gives back what its start-up freed (nats_scheduler/runtime/memory.py)."""

from __future__ import annotations

import sys

import pytest

from nats_scheduler.runtime.memory import release_freed_memory


def resident_mb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")
def test_freed_pages_go_back_to_the_system() -> None:
    # 200 MB of objects the C allocator serves, one in ten kept: freed, the pages stay
    # resident (the kept ones pin the heap) until they are handed back
    blocks = [bytes(2_000 + i % 7) for i in range(100_000)]
    kept = blocks[::10]
    del blocks
    before = resident_mb()
    assert release_freed_memory()
    after = resident_mb()
    assert len(kept) == 10_000
    assert before - after > 50, (before, after)

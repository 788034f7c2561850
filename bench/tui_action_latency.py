"""How long after confirming an action the console shows it (issue 6: "within a second").

    .venv/bin/python bench/tui_action_latency.py [--rounds 5]

A private nats-server, one provider with its admin service, and the console (headless,
driven by Textual's Pilot) connected through its own command-line connection path. Each
round holds, releases, and runs a Schedule now; the time runs from pressing Enter in the
confirmation to the row showing the new state (hold/release: the Schedules table; Run now:
the new Run's row in the detail view). Includes Pilot's own key handling.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import Input

from admin_tui.app import AstraboxConsole
from admin_tui.dialogs.confirm import ConfirmDialog
from admin_tui.launch import ConnectionLink
from admin_tui.screens.schedule_detail import ScheduleDetailScreen
from admin_tui.screens.schedules import SchedulesScreen
from admin_tui.widgets.run_table import RunTable
from admin_tui.widgets.schedule_table import ScheduleTable
from nats_scheduler import NatsSchedulerProvider, NatsSettings
from nats_scheduler.admin.service import start_admin_service
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.seam import RunPayload, Schedule
from nats_scheduler.testing.handler import RecordingRunHandler

DEP = "bench-console"


async def wait(pilot: Pilot[None], check: Callable[[], object], start: float) -> float:
    for _ in range(4000):
        if check():
            return time.perf_counter() - start
        await pilot.pause(0.005)
    raise TimeoutError("the console did not show the change within 20 s")


async def confirm_and_time(pilot: Pilot[None], key: str, check: Callable[[], object]) -> float:
    app = pilot.app
    await pilot.press(key)
    await wait(pilot, lambda: isinstance(app.screen, ConfirmDialog), time.perf_counter())
    app.screen.query_one("#reason", Input).value = "bench"
    start = time.perf_counter()
    await pilot.press("enter")
    return await wait(pilot, check, start)


def state(app: AstraboxConsole) -> str:
    table = app.screen.query_one(ScheduleTable)
    index = [c.key.value for c in table.ordered_columns].index("state")
    return str(table.get_row(DEP)[index]) if DEP in table.row_keys() else ""


async def measure(url: str, rounds: int) -> dict[str, list[float]]:
    settings = NatsSettings(url=url, prefix="BENCHTUI")
    provider = NatsSchedulerProvider(settings)
    provider.configure()
    await provider.start(RecordingRunHandler())
    service = await start_admin_service(provider)
    link = ConnectionLink(settings)
    results: dict[str, list[float]] = {"hold": [], "release": [], "run now": []}
    try:
        await provider.apply(Schedule(deployment_id=DEP, name=DEP, cron="0 3 * * *",
                                      timezone="UTC", enabled=True,
                                      payload=RunPayload(target="agent/bench", prompt="hi")))
        app = AstraboxConsole(connector=link.connect, user="bench")
        link.app = app
        async with app.run_test(size=(120, 36)) as pilot:
            await wait(pilot, lambda: isinstance(app.screen, SchedulesScreen) and state(app),
                       time.perf_counter())
            for _ in range(rounds):
                results["hold"].append(
                    await confirm_and_time(pilot, "h", lambda: state(app) == "held"))
                results["release"].append(
                    await confirm_and_time(pilot, "u", lambda: state(app) == "enabled"))
            await pilot.press("enter")
            await wait(pilot, lambda: isinstance(app.screen, ScheduleDetailScreen),
                       time.perf_counter())
            runs = app.screen.query_one(RunTable)
            for i in range(rounds):
                results["run now"].append(
                    await confirm_and_time(pilot, "r", lambda n=i: runs.row_count == n + 1))
    finally:
        await link.close()
        await service.stop()
        await provider.stop()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(Path(tmp) / "nats", server_name="bench-tui")
        server.start()
        try:
            results = asyncio.run(measure(server.url, args.rounds))
        finally:
            server.stop()
    for what, times in results.items():
        ms = sorted(t * 1000 for t in times)
        print(f"{what:8s} median {statistics.median(ms):5.0f} ms   worst {ms[-1]:5.0f} ms   "
              f"({len(ms)} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

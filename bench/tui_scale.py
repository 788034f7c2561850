"""The console with many Schedules: first rows, filter latency, quit, idle CPU and memory.

    .venv/bin/python bench/tui_scale.py               # 1,000 / 10,000 / 100,000, 3 runs each
    .venv/bin/python bench/tui_scale.py --schedules 100000 --runs 5
    .venv/bin/python bench/tui_scale.py --schedules 100000 --herd 170   # with a busy event stream

Why this exists: the console must stay usable at the provider's ``max_active_schedules``
(100,000): an operator during an incident on a big platform is who needs it most.

What it does, on one nats-server started here:

1. Writes N Schedules raw (pipelined ``schedule.applied`` events on their subjects, as the
   provider writes them; no Schedule is due within two hours, so nothing fires).
2. Starts a provider with its admin service in a child process (the console is another
   process in production, and the service's CPU must not be counted as the console's).
3. Reference, same run: a plain ``AdminClient`` reads the first page of the Schedule list
   and then the whole list (``list_schedules``): the floor of "first rows" and of "all
   loaded" (the console cannot show what the service has not sent); and the load ahead
   twice (cold: every calendar expanded; warm: reused within the hour), the floor of the
   Load view.
4. Per run, a fresh console process (a child mode of this script), opened through its own
   connection path and driven by Textual's Pilot, measures from outside the app's code:
   - first rows: from starting the app to the Schedules table holding rows;
   - all loaded: to the last page of the list being in the table;
   - filter: a keystroke completing a filter typed into the box, to the table holding the
     filtered rows (5 filters: narrow, wide, none matching, and back to empty; median); the
     text before the keystroke is put in the box first and waited for, so only the
     keystroke's own filter is timed;
   - idle CPU: the console process's CPU over an idle window after loading, percent of one
     core (with ``--herd R``: R Run events a second published meanwhile, a herd of Runs,
     by a publisher process of its own: its CPU is not the console's);
   - RSS: VmRSS after the idle window, and VmHWM (the peak);
   - views: from a key to the Events tail, the Cluster view, the Load view (the load ahead
     drawn), its refresh (``g``: the next answer drawn), the Schedules (``1``), the Load view
     again, the Schedules again with a refresh of the load just asked for (``g`` then ``1``:
     the same key as before with an answer on its way), and a Schedule's detail with its
     Run history showing their content, drawn (during the herd, with ``--herd``). The key is
     posted as the terminal posts it (``App.simulate_key``), not with ``Pilot.press``: that
     waits for the process to go idle, which under a herd it never does, so each press took
     its one-second limit twice, whatever the console did;
   - q: from pressing ``q`` to the app having exited.
5. ``nats-scheduler status`` as an operator runs it, once per run: its wall time and its
   peak RSS (the cluster, the health signals and the busiest minute, answered by the
   provider child from its Schedule table).
   The console run with 0 Schedules is the reference for CPU and memory.

Nothing is asserted; figures and ratios are printed. The machine may be shared: compare the
references of the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats

from nats_scheduler import NatsSchedulerProvider, NatsSettings
from nats_scheduler.core import runcore
from nats_scheduler.core.events import ScheduleApplied, ScheduleRecord, encode
from nats_scheduler.names import Names
from nats_scheduler.natsserver.process import NatsServer
from nats_scheduler.seam import RunPayload, Schedule, Trigger
from nats_scheduler.testing.handler import RecordingRunHandler

SCRIPT = Path(__file__).resolve()
PREFIX = "BENCHSCALE"
PAYLOAD = RunPayload(target="agent/bench", prompt="Summarise the night's tickets.")
TICKS = os.sysconf("SC_CLK_TCK")
FILTERS = ("con-0004", "42", "zzz-none", "con-00")
"""Typed into the filter box one after the other (then cleared): narrow, wide, nothing, a
prefix of every tenth."""
VIEW_TIMEOUT = 30.0
"""Longest wait for a view's content (seconds); longer counts as never shown."""


def bench_schedule(i: int, now: datetime, width: int = 6) -> Schedule:
    """Schedule ``i`` (``con-`` and ``i`` in ``width`` digits): daily, in UTC, never due
    within two hours of ``now``."""
    hour = (now.hour + 3 + i % 19) % 24
    dep = f"con-{i:0{width}d}"
    return Schedule(dep, f"report-{i % 977:03d}-{i}", f"{i % 60} {hour} * * *", "UTC", True,
                    PAYLOAD, 1)


async def seed_schedules(url: str, prefix: str, count: int, *, chunk: int = 5_000,
                         width: int = 6) -> float:
    """Write ``count`` Schedules raw into a store whose streams exist; returns seconds."""
    names = Names(prefix)
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=60)
    now = datetime.now(UTC)
    began = time.perf_counter()
    try:
        for start in range(0, count, chunk):
            for i in range(start, min(count, start + chunk)):
                schedule = bench_schedule(i, now, width)
                event = ScheduleApplied(at=now, actor="bench",
                                        schedule=ScheduleRecord.of(schedule, updated_at=now))
                await js.publish_async(names.schedule_subject(schedule.deployment_id),
                                       encode(event))
            await js.publish_async_completed()
    finally:
        await nc.close()
    return time.perf_counter() - began


def settings_for(url: str, prefix: str, count: int, **extra: Any) -> NatsSettings:
    return NatsSettings(url=url, prefix=prefix, max_active_schedules=max(count, 1), **extra)


async def create_store(url: str, prefix: str) -> None:
    """The provider's streams, created the way the provider creates them (start, stop)."""
    provider = NatsSchedulerProvider(settings_for(url, prefix, 1, admin_service=False))
    provider.configure()
    await provider.start(RecordingRunHandler())
    await provider.stop()


# ----------------------------------------------------------------------------- measures


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _cpu() -> float:
    return time.process_time()


async def herd(url: str, prefix: str, count: int, rate: float, stop: asyncio.Event) -> int:
    """Publish ``rate`` Run events a second (created with its claim, the Session, the turn:
    the events of a Run a replica fires) for spread Schedules until ``stop``: a herd of
    Runs as the console's feed sees it (10,000 Runs in a minute: ``rate`` 500)."""
    names = Names(prefix)
    nc = await nats.connect(url)
    js = nc.jetstream(timeout=30)
    sent, i = 0, 0
    tag = f"{os.getpid() % 10_000_000:07d}"  # each console run's herd: Runs of its own
    began = time.perf_counter()
    try:
        while not stop.is_set():
            due = datetime.now(UTC).replace(microsecond=0)
            dep = f"con-{(i * 7919) % max(count, 1):06d}"
            run_id = f"herd{tag}{i:07d}{dep[-6:]}"
            created = runcore.create(run_id=run_id, deployment_id=dep, trigger=Trigger.RUN_NOW,
                                     due_at=None, payload=PAYLOAD, now=due, actor="bench",
                                     holder="bench")  # stored claimed, as a replica does
            started = runcore.session_started(created.run, session_id="s", now=due,
                                              actor="bench")
            done = runcore.dispatched(started.run, turn_id="t", now=due, actor="bench")
            subject = names.run_subject(dep, run_id)
            for event in (created, started, done):
                await js.publish_async(subject, encode(event))
            sent += 3
            i += 1
            ahead = sent / rate - (time.perf_counter() - began)
            if ahead > 0:
                await asyncio.sleep(ahead)  # paces the publisher (not a wait for a condition)
        await js.publish_async_completed()
    finally:
        await nc.close()
    return sent


async def console_run(url: str, prefix: str, count: int, idle: float, rate: float) -> dict:
    """One console, start to quit (child mode): the figures of one run."""
    from textual.pilot import Pilot
    from textual.widgets import Input

    from admin_tui.app import AstraboxConsole
    from admin_tui.launch import ConnectionLink
    from admin_tui.screens.schedules import SchedulesScreen
    from admin_tui.widgets.schedule_table import ScheduleTable

    now = datetime.now(UTC)
    ids = [bench_schedule(i, now) for i in range(count)]
    typed_first = [text[:-1] if text else "c" for text in (*FILTERS, "")]
    expected = {text: sum(1 for s in ids if text in s.deployment_id or text in s.name.lower())
                for text in {*FILTERS, *typed_first} if text}
    link = ConnectionLink(settings_for(url, prefix, count))
    app = AstraboxConsole(connector=link.connect, user="bench")
    link.app = app
    figures: dict[str, Any] = {}

    async def until(pilot: Pilot[None], check: Callable[[], object], timeout: float) -> float:
        began = time.perf_counter()
        while not check():
            if time.perf_counter() - began > timeout:
                shown = table().row_count if screen() is not None else None
                boxes = app.screen.query("#filter")
                typed = boxes.first(Input).value if boxes else None
                raise TimeoutError(f"not within {timeout} s on {type(app.screen).__name__} "
                                   f"({shown} rows shown, filter {typed!r})")
            await pilot.pause(0.002)
        return time.perf_counter() - began

    def screen() -> SchedulesScreen | None:
        return app.screen if isinstance(app.screen, SchedulesScreen) else None

    def table() -> ScheduleTable:
        return app.screen.query_one(ScheduleTable)

    began = time.perf_counter()
    async with app.run_test(size=(120, 36)) as pilot:
        await until(pilot, lambda: screen() is not None and (
            table().row_count > 0 or (count == 0 and screen().complete)), 120)  # type: ignore[union-attr]
        figures["first_rows_s"] = time.perf_counter() - began
        await until(pilot, lambda: screen().complete and table().row_count == count, 600)  # type: ignore[union-attr]
        figures["loaded_s"] = time.perf_counter() - began
        box = app.screen.query_one("#filter", Input)
        box.focus()
        latencies = []
        if True:  # with 0 Schedules too: the keystroke's own cost through Pilot, the floor
            for text in (*FILTERS, ""):
                before = text[:-1] if text else "c"
                box.value = before
                await pilot.pause(0.2)
                # the filter before the key is applied (at a million rows it may take longer
                # than the pause): only the key's own filter is timed
                await until(pilot, lambda b=before: table().row_count == expected.get(b, count)
                            and box.value == b, 30)
                box.action_end()  # the key below types at the end (focus selected all)
                await pilot.pause()
                want = expected.get(text, count)
                start = time.perf_counter()
                if text:
                    await pilot.press(text[-1])
                else:
                    await pilot.press("backspace")
                await until(pilot, lambda w=want, t=text: table().row_count == w
                            and box.value == t, 30)
                await pilot.pause()  # and drawn
                latencies.append(time.perf_counter() - start)
        figures["filter_s"] = latencies
        table().focus()
        herding = (await child("--publish", "--url", url, "--prefix", prefix, "--schedules",
                               str(count), "--herd", str(rate)))[0] if rate else None
        await pilot.pause(1.0)
        cpu, wall = _cpu(), time.perf_counter()
        await asyncio.sleep(idle)  # the idle window itself: the app runs in this loop
        figures["idle_cpu_pct"] = 100 * (_cpu() - cpu) / (time.perf_counter() - wall)
        if count:  # the other views, while the herd (if any) still runs
            figures["views_s"] = await other_views(app, pilot, until, ids[count // 2])
        if herding is not None:
            figures["herd_events"] = (await stop_child(herding))["sent"]
        if count and rate:  # a filter during the herd's aftermath: still answered?
            start = time.perf_counter()
            box.value = FILTERS[0]
            await until(pilot, lambda: table().row_count == expected[FILTERS[0]], 30)
            figures["filter_after_herd_s"] = time.perf_counter() - start
        figures["rss_mb"] = _status_kb("VmRSS") / 1024
        figures["peak_mb"] = _status_kb("VmHWM") / 1024
        quit_began = time.perf_counter()
        await pilot.press("q")
    figures["quit_s"] = time.perf_counter() - quit_began
    await link.close()
    return figures


async def other_views(app: Any, pilot: Any, until: Callable[..., Any], schedule: Any
                      ) -> dict[str, float]:
    """Seconds from a key to each other view holding its content: the Events tail (``2``),
    the Cluster view (``3``), back to the Schedules (``1``), a Schedule's detail with its
    Run history (``/`` filter to it, ``enter``) and back (``escape``)."""
    from textual.widgets import Input

    from admin_tui.screens.cluster import ClusterScreen
    from admin_tui.screens.events import EventsScreen
    from admin_tui.screens.load import LoadScreen
    from admin_tui.screens.schedule_detail import ScheduleDetailScreen
    from admin_tui.screens.schedules import SchedulesScreen
    from admin_tui.widgets.event_table import EventTable
    from admin_tui.widgets.replica_table import ReplicaTable
    from admin_tui.widgets.schedule_table import ScheduleTable

    def on(kind: type, ready: Callable[[Any], bool]) -> Callable[[], bool]:
        return lambda: isinstance(app.screen, kind) and ready(app.screen)

    async def timed(key: str, check: Callable[[], bool]) -> float:
        """Seconds to the view's content, drawn; infinite if not within VIEW_TIMEOUT."""
        start = time.perf_counter()
        app.simulate_key(key)
        try:
            await until(pilot, check, VIEW_TIMEOUT)
        except TimeoutError:
            return math.inf
        await pilot.pause(0)  # and drawn: every message handled, then the screen updated
        return time.perf_counter() - start

    seconds = {
        "events": await timed("2", on(EventsScreen, lambda s: s.query_one(EventTable).row_count
                                      > 0)),
        "cluster": await timed("3", on(ClusterScreen, lambda s: s.status is not None
                                       and s.query_one(ReplicaTable).row_count > 0)),
        "load": await timed("4", on(LoadScreen, lambda s: s.load is not None)),
    }
    # The load view refreshed (g); then the same key to the Schedules with nothing on its way
    # and, from the load view again, with a refresh just asked for: the view switches at
    # once, it does not wait for the answer (a worker awaits it).
    shown = app.screen.load
    seconds["load_refresh"] = await timed("g", on(LoadScreen, lambda s: s.load is not shown))
    schedules_shown = on(SchedulesScreen, lambda s: s.query_one(ScheduleTable).row_count > 0)
    seconds["schedules"] = await timed("1", schedules_shown)
    seconds["load_again"] = await timed("4", on(LoadScreen, lambda s: s.load is not None))
    app.simulate_key("g")
    seconds["key_during_refresh"] = await timed("1", schedules_shown)
    box = app.screen.query_one("#filter", Input)
    box.value = schedule.deployment_id
    await until(pilot, lambda: app.screen.query_one(ScheduleTable).row_count == 1, 30)
    app.screen.query_one(ScheduleTable).focus()
    await until(pilot, lambda: app.screen.query_one(ScheduleTable).has_focus, 30)
    seconds["detail"] = await timed("enter", on(
        ScheduleDetailScreen, lambda s: s.detail is not None and s.page is not None))
    seconds["back"] = await timed("escape", on(SchedulesScreen, lambda _s: True))
    box = app.screen.query_one("#filter", Input)
    box.value = ""
    await until(pilot, lambda: app.screen.query_one(ScheduleTable).row_count > 1, 30)
    return seconds


def status_run(url: str, prefix: str) -> dict[str, float]:
    """``nats-scheduler status`` as an operator runs it: its wall time, peak RSS and exit
    code (7: a health signal is raised), measured by ``bench/check_scale.py``'s wrapper
    (a child of this process would report this process's size as its peak)."""
    from check_scale import run_child  # bench/check_scale.py, beside this script

    child = run_child([sys.executable, "-m", "nats_scheduler.cli.main", "status", "--url",
                       url, "--prefix", prefix])
    return {"status_s": child.wall_s, "status_peak_mb": child.peak_mb,
            "status_exit": float(child.returncode)}


async def reference_load(url: str, prefix: str) -> tuple[float, float]:
    """A plain client asks for the load ahead (24 h) twice: the first answer expands every
    calendar's due times for the hour (cold), the second reuses them (warm). Seconds."""
    from nats_scheduler.admin.client import AdminClient

    nc = await nats.connect(url)
    try:
        client = AdminClient(nc, prefix, timeout=60)
        times = []
        for _ in range(2):
            began = time.perf_counter()
            await client.load_ahead(24)
            times.append(time.perf_counter() - began)
        return times[0], times[1]
    finally:
        await nc.close()


async def reference_list(url: str, prefix: str) -> tuple[float, float]:
    """A plain client: the first page of the list, then the whole list (seconds)."""
    from nats_scheduler.admin.client import AdminClient

    nc = await nats.connect(url)
    try:
        client = AdminClient(nc, prefix, timeout=30)
        began = time.perf_counter()
        pages = client.schedule_pages()
        await anext(pages)
        first = time.perf_counter() - began
        await pages.aclose()
        began = time.perf_counter()
        await client.list_schedules()
        return first, time.perf_counter() - began
    finally:
        await nc.close()


# ----------------------------------------------------------------------------- children


async def serve_main(url: str, prefix: str, count: int) -> None:
    """The provider child: start with its admin service, run until stdin closes."""
    provider = NatsSchedulerProvider(settings_for(url, prefix, count))
    provider.configure()
    await provider.start(RecordingRunHandler())
    print(json.dumps({"ready": True}), flush=True)
    await asyncio.to_thread(sys.stdin.read)
    await provider.stop()


async def publish_main(url: str, prefix: str, count: int, rate: float) -> None:
    """The herd's child: publish from ready until stdin closes, then say how many."""
    stop = asyncio.Event()
    publishing = asyncio.create_task(herd(url, prefix, count, rate, stop))
    print(json.dumps({"ready": True}), flush=True)
    await asyncio.to_thread(sys.stdin.read)
    stop.set()
    print(json.dumps({"sent": await publishing}), flush=True)


async def child(*args: str) -> tuple[asyncio.subprocess.Process, dict]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SCRIPT), *args, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 900)
    if not line:
        raise RuntimeError(f"child {args[0]} ended without an answer")
    return proc, json.loads(line)


async def stop_child(proc: asyncio.subprocess.Process) -> dict:
    """Close the child's stdin (its signal to stop); returns its last answer, if any."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.close()
    try:
        last = await asyncio.wait_for(proc.stdout.read(), 60)
        await asyncio.wait_for(proc.wait(), 60)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return {}
    lines = last.decode().splitlines()
    return json.loads(lines[-1]) if lines else {}


async def measure(server: NatsServer, count: int, runs: int, idle: float, rate: float
                  ) -> dict[str, Any]:
    prefix = f"{PREFIX}{count}"
    await create_store(server.url, prefix)
    seeded = await seed_schedules(server.url, prefix, count)
    print(f"\n{count:,} Schedules: written raw in {seeded:.1f} s", flush=True)
    began = time.perf_counter()
    provider, _ = await child("--serve", "--url", server.url, "--prefix", prefix,
                              "--schedules", str(count))
    print(f"  provider child ready in {time.perf_counter() - began:.1f} s", flush=True)
    try:
        first, whole = await reference_list(server.url, prefix)
        print(f"  reference: first page of the list {first * 1000:.0f} ms, whole list "
              f"{whole:.2f} s (plain AdminClient)", flush=True)
        statuses = [await asyncio.to_thread(status_run, server.url, prefix)
                    for _ in range(runs)]
        print("  nats-scheduler status: " + ", ".join(
            f"{st['status_s']:.2f} s (peak {st['status_peak_mb']:.0f} MB, exit "
            f"{st['status_exit']:.0f})" for st in statuses), flush=True)
        cold, warm = await reference_load(server.url, prefix)
        print(f"  reference: the load ahead (24 h) {cold * 1000:.0f} ms cold (calendars "
              f"expanded), {warm * 1000:.0f} ms warm (plain AdminClient)", flush=True)
        rows = []
        for _ in range(runs):
            proc, figures = await child("--console", "--url", server.url, "--prefix", prefix,
                                        "--schedules", str(count), "--idle", str(idle),
                                        "--herd", str(rate))
            await proc.wait()
            rows.append(figures)
            filt = figures["filter_s"]
            print(f"  run: first rows {figures['first_rows_s']:.2f} s, all loaded "
                  f"{figures['loaded_s']:.2f} s, filter median "
                  f"{statistics.median(filt) * 1000 if filt else 0:.0f} ms (max "
                  f"{max(filt) * 1000 if filt else 0:.0f}), idle CPU "
                  f"{figures['idle_cpu_pct']:.1f} %, RSS {figures['rss_mb']:.0f} MB (peak "
                  f"{figures['peak_mb']:.0f}), q {figures['quit_s'] * 1000:.0f} ms"
                  + (f", {figures.get('herd_events', 0)} herd events, filter after the herd "
                     f"{figures.get('filter_after_herd_s', 0) * 1000:.0f} ms" if rate else ""),
                  flush=True)
            if "views_s" in figures:
                print("  views (key to content shown): " + ", ".join(
                    f"{view} {ms(sec)}" for view, sec in figures["views_s"].items()),
                    flush=True)
        return {"count": count, "first_page_s": first, "whole_list_s": whole,
                "load_cold_s": cold, "load_warm_s": warm, "runs": rows, "status": statuses}
    finally:
        await stop_child(provider)


def ms(seconds: float) -> str:
    return f"over {VIEW_TIMEOUT:g} s" if seconds == math.inf else f"{seconds * 1000:.0f} ms"


def median(rows: list[dict], key: str) -> float:
    values = []
    for row in rows:
        value = row.get(key)
        if isinstance(value, list):
            values.append(statistics.median(value) if value else 0.0)
        elif value is not None:
            values.append(value)
    return statistics.median(values) if values else 0.0


def report(results: list[dict], rate: float) -> None:
    print(f"\nmedians (herd: {rate:g} Run events/s during the idle window)" if rate
          else "\nmedians")
    print(f"{'Schedules':>10} {'first rows':>11} {'floor':>7} {'loaded':>8} {'floor':>7} "
          f"{'filter':>8} {'idle CPU':>9} {'RSS':>7} {'peak':>7} {'q':>7}")
    for r in results:
        rows = r["runs"]
        print(f"{r['count']:>10,} {median(rows, 'first_rows_s'):>10.2f}s "
              f"{r['first_page_s']:>6.2f}s {median(rows, 'loaded_s'):>7.2f}s "
              f"{r['whole_list_s']:>6.2f}s {median(rows, 'filter_s') * 1000:>6.0f}ms "
              f"{median(rows, 'idle_cpu_pct'):>8.1f}% {median(rows, 'rss_mb'):>5.0f}MB "
              f"{median(rows, 'peak_mb'):>5.0f}MB {median(rows, 'quit_s') * 1000:>5.0f}ms")
    for r in results:
        views = [row["views_s"] for row in r["runs"] if "views_s" in row]
        if views:
            print(f"{r['count']:>10,} views, median: " + ", ".join(
                f"{view} {ms(statistics.median(v[view] for v in views))}"
                for view in views[0]))
    base = results[0]["runs"]
    for r in results[1:]:
        first = median(r["runs"], "first_rows_s") / max(median(base, "first_rows_s"), 1e-9)
        print(f"{r['count']:,} vs {results[0]['count']:,}: RSS +"
              f"{median(r['runs'], 'rss_mb') - median(base, 'rss_mb'):.0f} MB, first rows "
              f"{first:.2f}x")
    for r in results:
        if r["count"]:
            print(f"{r['count']:>10,} load ahead, plain client: {r['load_cold_s'] * 1000:.0f} ms "
                  f"cold, {r['load_warm_s'] * 1000:.0f} ms warm")
    print("floor: the plain client's first page / whole list, same run")
    for r in results:
        times = [st["status_s"] for st in r["status"]]
        peaks = [st["status_peak_mb"] for st in r["status"]]
        print(f"{r['count']:>10,} nats-scheduler status: median {statistics.median(times):.2f} s,"
              f" peak RSS {statistics.median(peaks):.0f} MB")


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(Path(tmp) / "nats", server_name="bench-tui-scale",
                            max_file_store=8 * 1024**3)
        server.start()
        try:
            results = [await measure(server, n, args.runs, args.idle, args.herd)
                       for n in [0, *args.schedules]]
        finally:
            server.stop()
    report(results, args.herd)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idle", type=float, default=10.0, help="idle window, seconds")
    parser.add_argument("--herd", type=float, default=0.0,
                        help="Run events a second published during the idle window")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--console", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--publish", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    if arguments.serve:
        asyncio.run(serve_main(arguments.url, arguments.prefix, arguments.schedules[0]))
    elif arguments.publish:
        asyncio.run(publish_main(arguments.url, arguments.prefix, arguments.schedules[0],
                                 arguments.herd))
    elif arguments.console:
        result = asyncio.run(console_run(arguments.url, arguments.prefix,
                                         arguments.schedules[0], arguments.idle,
                                         arguments.herd))
        print(json.dumps(result), flush=True)
    else:
        asyncio.run(main(arguments))

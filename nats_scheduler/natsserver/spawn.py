"""A nats-server started from Python never outlives the Python process that started it.

Two mechanisms, because neither covers every way a process ends:

* **An ``atexit`` hook** stops whatever this process started and did not stop
  (:func:`track` / :func:`untrack`), so an interrupted run (Ctrl+C, a failing test) leaves
  no server behind, holding its ports and store.
* **A parent-death signal (Linux).** ``atexit`` never runs on SIGKILL (or an OOM kill), so
  each server is started with ``prctl(PR_SET_PDEATHSIG, SIGTERM)``: the kernel sends it
  SIGTERM when its parent goes away. The kernel ties that signal to the THREAD that forked
  the server, not to the process: a server spawned from a short-lived thread
  (``asyncio.to_thread`` in an event loop that later closes, a ``threading.Thread`` that
  returns) would be terminated when that thread exits. So every server is forked from one
  long-lived spawner thread per process (:func:`popen`), which ends only when the
  interpreter does, whichever thread starts the server. Elsewhere (macOS, ...) there is no
  such signal and the spawn is a plain ``Popen``.

Apart from :mod:`.process` (what a server is and how it becomes ready) because this is about
this Python process, not about any one server (tests/test_server_parent_death.py).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol


class Stoppable(Protocol):
    """What the ``atexit`` hook needs of a server: a way to stop it."""

    def stop(self, timeout: float = ...) -> int | None: ...


# --------------------------------------------------------------------------- process registry

_LIVE: weakref.WeakSet[Stoppable] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


def track(server: Stoppable) -> None:
    """Remember a started server, to stop it at exit if nobody else does."""
    with _LIVE_LOCK:
        _LIVE.add(server)


def untrack(server: Stoppable) -> None:
    """Forget a server that was stopped or killed."""
    with _LIVE_LOCK:
        _LIVE.discard(server)


@atexit.register
def _stop_leftovers() -> None:
    """Stop servers this process started and never stopped (e.g. after Ctrl+C)."""
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        with contextlib.suppress(Exception):
            server.stop(timeout=2)


# --------------------------------------------------------------------------- parent-death signal

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _load_prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, resolved once in the parent (the forked child must not load libs)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()


def _die_with_parent(prctl: Callable[..., int], parent_pid: int) -> Callable[[], None]:
    """A ``preexec_fn``: SIGTERM the child when the thread that forked it exits.

    If the parent already died between fork and prctl, the signal would never come (the
    child was reparented first), so the child exits at once instead of running orphaned.
    """

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent_pid:
            os._exit(1)

    return preexec


class _Spawner:
    """One thread per process that forks every server, so PDEATHSIG means "process died".

    The thread lives until interpreter shutdown (or a SIGKILL), never earlier. A forked
    copy of this process (multiprocessing) starts over: threads are not copied by fork.
    """

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def popen(
        self, prctl: Callable[..., int], args: list[str], **kw: Any
    ) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="nats-server-spawner")
            executor = self._executor
        preexec = _die_with_parent(prctl, os.getpid())
        return executor.submit(subprocess.Popen, args, preexec_fn=preexec, **kw).result()


_SPAWNER = _Spawner()


def popen(args: list[str], **kw: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen`` for a server: tied to this process's life where the OS allows."""
    if _PRCTL is None:
        return subprocess.Popen(args, **kw)
    return _SPAWNER.popen(_PRCTL, args, **kw)

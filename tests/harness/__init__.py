"""This repository's own test harness: not shipped, not for provider authors.

What a provider author imports lives in :mod:`nats_scheduler.testing` (the contract suite and
``RecordingRunHandler``). Here is what only this repo's tests and ``bench/`` use: replica
subprocesses (:mod:`.replica`, :mod:`.replicas`) with a clock a test can step
(:mod:`.clocks`), the cross-process SQLite handler (:mod:`.shared_handler`), stored-history
readers (:mod:`.history`), fast connects and unique prefixes (:mod:`.servers`), the 3-node
cluster (:mod:`.cluster`) and a loopback TCP proxy to partition it (:mod:`.proxy`), the
invariant checker wired for tests (:mod:`.checking`) and what the fault scenarios and the
soak share (:mod:`.scenario`).

``tests`` itself has no ``__init__.py`` (test modules import helpers as ``tests.providers``
and ``inmemory_provider`` alike), so ``tests`` is a namespace package found from the
repository root: pytest puts the root on ``sys.path`` (``pythonpath`` in pyproject.toml),
replica subprocesses run with it as their working directory, and ``bench/`` scripts add it.
"""

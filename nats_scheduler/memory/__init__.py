"""The scheduler's ports (:mod:`nats_scheduler.ports`) in memory: a tool for tests and the
deterministic simulation, never a production backend (it forgets everything with its process).

:class:`~.store.MemoryStore` holds what every simulated replica shares; :class:`~.ports.MemoryPorts`
is one replica's view of it. ``tests/test_ports_contract.py`` holds it to the same contract as
the JetStream store.
"""

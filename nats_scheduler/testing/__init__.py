"""The public testing kit for scheduler providers: the contract suite and an AstraBox stand-in.

- :class:`~nats_scheduler.testing.conformance.SchedulerProviderContractSuite`: the seam's
  contract as a pytest class; a provider binds it by subclassing (see that module).
- :class:`~nats_scheduler.testing.handler.RecordingRunHandler`: an in-memory ``RunHandler``
  that records every call and can be told to fail, block or hang.

The suite needs pytest and anyio, which are not runtime dependencies of the provider: a
provider author installs them with ``pip install 'astrabox-scheduler-nats[testing]'``.
(``handler`` alone needs neither.) This package holds nothing else: this repository's own
multi-process harness lives under ``tests/harness/`` and is not shipped.
"""

"""The ``nats-scheduler`` command line (entry point ``nats_scheduler.cli.main:main``)."""

"""A development host standing in for AstraBox around a scheduler provider.

It keeps Deployment records in SQLite (:mod:`.records`), loads the provider selected by
``ASTRABOX_SCHEDULER_PROVIDER`` through the ``astrabox.providers.scheduler`` entry point
(:mod:`.loader`), passes it the Schedules the way AstraBox does (``reconcile`` at start,
``apply``/``delete`` on change, :mod:`.host`) and answers its calls with a RunHandler whose
Sessions live in the same SQLite file, shared by every replica (:mod:`.handler`).
``python -m nats_scheduler.devhost`` (or ``nats-scheduler devhost``) is its command line.
"""

"""The AstraBox scheduler console (``astrabox-sched-tui``), a Textual app."""

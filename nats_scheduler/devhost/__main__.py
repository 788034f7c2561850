"""``python -m nats_scheduler.devhost``: the dev host's command line."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())

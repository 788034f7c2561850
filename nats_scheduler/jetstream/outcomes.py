"""What the Run log's writes answer (:class:`~nats_scheduler.ports.runs.Announcement`,
:class:`~nats_scheduler.ports.runs.Stored`): named in the Run journal's port."""

from __future__ import annotations

from ..ports.runs import Announcement, Stored

__all__ = ["Announcement", "Stored"]

"""Foreign messages, as every port sees them.

A message on a journal, an index, a bucket or the checkpoints that is not the provider's
own (written by hand with its login, by a newer release, damaged, or an event filed under
another Schedule or Run) is *foreign*. Every port promises the same about it: a read skips
it (a Schedule or Run is its last message of ours), a write goes after it (it never wedges
a subject), a feed skips it and counts it. ``jetstream/foreign.py`` decides what is foreign
on the JetStream store; the twin stores it as such (``memory/store.py``).
"""

from __future__ import annotations


class ForeignMessage(Exception):
    """A stored message a reader cannot take as the provider's own; ``reason`` says why."""

    def __init__(self, subject: str, reason: str) -> None:
        super().__init__(f"{subject}: {reason}")
        self.subject = subject
        self.reason = reason

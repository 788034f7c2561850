"""The nonces that make a writer's decisions' Msg-Ids unique.

A later event's ``Nats-Msg-Id`` names the writer's decision (``names.run_event_msg_id``):
the subject, the expected sequence and a nonce, so two decisions taken on the same sequence
(by two replicas, or by one replica twice after a lost race) are never mistaken for one
within the duplicate window. The nonce is state, so it lives with the writer, not in
``names.py`` (which only formats): each :class:`~nats_scheduler.jetstream.store.Store` (one
per provider process) draws its writer part once and counts its decisions.
"""

from __future__ import annotations

import itertools
import secrets

WRITER_NONCE_BYTES = 6
"""Random bytes of a writer's part (12 hex digits): drawn once per writer."""


class DecisionNonces:
    """One writer's decision nonces: its random part, then a counter, in hex.

    Cheaper than a random draw per decision, and unique: the writer part tells writers
    apart, the counter tells this writer's decisions apart.
    """

    def __init__(self, writer: str | None = None) -> None:
        self.writer = writer if writer is not None else secrets.token_hex(WRITER_NONCE_BYTES)
        """This writer's part of its decisions' Msg-Ids."""
        self._count = itertools.count(1)

    def next(self) -> str:
        """A nonce unique to one decision of this writer."""
        return f"{self.writer}{next(self._count):x}"

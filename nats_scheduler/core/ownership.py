"""Which live replica owns a due time: rendezvous (highest-random-weight) hashing.

Any replica may fire any due time it sees; the store lets exactly one Run win. Naming an
owner per (deployment, due time) lets the others hold back, so the server does the work of
one create per due time instead of one per replica. The choice must be the same on every
replica that sees the same members, whatever order it learnt them in, and must survive a
restart: so the weights come from ``hashlib.blake2b`` (never Python's salted ``hash()``).

Rendezvous hashing gives each (member, key) pair a weight and picks the heaviest member.
When a member joins it takes about ``1/n`` of the keys, all from the others; when one leaves
only its own keys move. So a replica starting or dying reshuffles little, and two replicas
whose views differ for a moment (one has not yet seen a newcomer) disagree on few keys;
the store still makes one Run win when they both fire.

Pure and fast: the firing path asks for 10,000 due times at one minute boundary. Each
member's hash state is computed once per member set (cached), and each key then costs one
``copy``/``update``/``digest`` per member.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import lru_cache

_DIGEST_SIZE = 8

_Ring = tuple[tuple[str, hashlib.blake2b], ...]


def _member_state(member: str) -> hashlib.blake2b:
    """A blake2b state already fed the member (length-prefixed, so no two pairs collide)."""
    raw = member.encode("utf-8", "surrogatepass")
    state = hashlib.blake2b(digest_size=_DIGEST_SIZE)
    state.update(len(raw).to_bytes(4, "big"))
    state.update(raw)
    return state


@lru_cache(maxsize=64)
def _ring(members: tuple[str, ...]) -> _Ring:
    """The members' hash states, in a fixed order: computed once per member set."""
    return tuple((m, _member_state(m)) for m in sorted(set(members)))


def owner(members: Sequence[str], key: str) -> str:
    """The member that owns ``key``: the one with the highest weight for it.

    The same for any order of ``members`` (duplicates count once). Raises ValueError when
    there is no member (a replica always counts itself, so the firing path never has none).
    """
    ring = _ring(tuple(members))
    if not ring:
        raise ValueError("owner() needs at least one member")
    raw = key.encode("utf-8", "surrogatepass")
    best, best_weight = "", b""
    for member, state in ring:
        hashed = state.copy()
        hashed.update(raw)
        weight = hashed.digest()
        # Bytes compare like big-endian integers; on an (astronomically unlikely) tie the
        # first in sorted order keeps it, so the answer still does not depend on input order.
        if weight > best_weight:
            best, best_weight = member, weight
    return best


def owner_key(deployment_id: str, due: datetime) -> str:
    """The ownership key of one due time of one deployment: ``<deployment>@<UTC ISO time>``.

    The same on every replica (the time is normalised to UTC, so replicas in different
    zones agree). A naive ``due`` is refused rather than read as this machine's local time.
    The ISO time never contains ``@``, so the key is unambiguous whatever the deployment ID.
    """
    return f"{deployment_id}@{_utc_iso(due)}"


@lru_cache(maxsize=1024)
def _utc_iso(due: datetime) -> str:
    """``due`` in UTC as ISO text; cached, as a minute boundary repeats one due time 10,000x."""
    if due.tzinfo is None or due.utcoffset() is None:
        raise ValueError("owner_key() needs a timezone-aware due time")
    return due.astimezone(UTC).isoformat()

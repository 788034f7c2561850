"""Dispatch leases in a KV bucket: who may call the handler for a Run, and until when.

A lease is one key per Run (the Run ID's token) whose value names the holder and the
instant it expires. Every change is a compare-and-set on the key's revision (``kv.create``,
``kv.update(last=...)``, ADR-8): never read-then-write, because KV reads are not
read-after-write consistent across replicas. A process takes an expired lease over with the
same CAS, so exactly one of several sweepers wins.

The lease only decides who *tries*; it is not what makes a lost holder harmless. That is the
Run's own subject: a new holder appends ``run.claimed`` conditionally on the subject's last
sequence, after which every append of the old holder fails (docs/design.md, "A single
writer per Run").

Whether a lease has expired is judged by each reader on its own elapsed time, never by
comparing the holder's written ``expires_at`` with the reader's wall clock: a lease is
expired once this process has seen the key's revision unchanged for a whole lease length
(``time.monotonic``). A live holder renews every third of a lease, which changes the
revision, so a reader whose clock runs minutes ahead, or a holder whose clock was stepped
back, never makes a live lease look expired (docs/failure-modes.md, tests/faults/
test_faults_clock.py). The price: a process that has just started waits one lease length of
observation before it takes over another's lease. ``expires_at`` stays in the value for the
holder itself (it re-proves its lease by CAS once its own clock passes it) and for people.

Every write goes through the store (:class:`~.event_store.LeaseStore`): sent once, never
retried there, so a renewal waits no longer than one publish (its caller retries on the
next third of a lease), yet what it sees counts for the store's failover like any other
operation: a holder on a server that stopped answering moves to another one
(:mod:`.retry`). The writes made in one turn of the event loop leave together
(``Store.publish_grouped``): a herd's renewals share one atomic batch and one fsync, and a
lost compare-and-set among them still gets its own answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from enum import Enum
from typing import TypeVar

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.msg import Msg

from ..clock import Clock
from ..names import (
    HDR_EXPECTED_LAST_SUBJECT_SEQUENCE,
    HDR_KV_OPERATION,
    HDR_MARKER_REASON,
    HDR_TTL,
)
from ..ports.leases import FREE, UNREADABLE, Claimed, Lease, LeaseValue
from . import errors
from .acks import Outgoing
from .event_store import LeaseStore
from .foreign import ForeignMessage, lease_run_id, lease_value_on

__all__ = ["FREE", "Claimed", "Lease", "LeaseValue", "Leases"]

log = logging.getLogger(__name__)


READ_GAP = 0.5
"""Lease lengths without a read of a lease after which its unchanged revision counts as
first seen again (see :meth:`Leases.expired`)."""

_PRUNE_ABOVE = 10_000
"""Observed leases kept before the ones not read for a while are forgotten."""

_encode = msgspec.json.Encoder().encode

CLOSED_MARKER_TTL = 10.0
"""Seconds the purge marker of a key closed by :meth:`Leases.forget` lives."""

OPEN_KEY_TTL_MIN = 60.0
"""Seconds an open key lives after its last write, at least (12 lease lengths if longer).

Every write of a holder (the open, a takeover, a renewal) carries this TTL, so a finished
Run's key expires by itself instead of being purged: one write fewer per Run. A live holder
renews every third of a lease, so its key never expires under it; a dead holder's key may
expire before another replica takes the Run over, which then creates the key again (every
live replica knows its unfinished Runs from their events, not from keys). What the TTL
costs: a replica that starts reads the keys of the Runs finished in the last TTL too, and
an unfinished Run whose key expired while NO replica ran is found again by the warm-up of
the newest Runs rather than at start (docs/architecture.md, "History and retention")."""

OPEN_RUNS_HEARTBEAT = 5.0
"""Seconds between the idle heartbeats of :meth:`Leases.open_runs`' consumer."""

OPEN_RUNS_RECHECK = 0.5
"""Seconds :meth:`Leases.open_runs` waits for its last delivery before asking the server
how far its consumer got (the read ends sooner when the last delivery arrives)."""

T = TypeVar("T")


class _Miss(Enum):
    """Why a lease operation on the bucket has no result."""

    EXISTS = "the key exists or moved on (a create or a compare-and-set lost)"
    GONE = "the key vanished (purged as its Run finished)"
    BUSY = "the store is struggling (a transient failure)"


async def _attempt(call: Awaitable[T]) -> T | _Miss:
    """``call``'s result, or why there is none; other failures are raised."""
    try:
        return await call
    except nats.js.errors.KeyWrongLastSequenceError:
        return _Miss.EXISTS
    except nats.js.errors.KeyNotFoundError:
        # nats-py's create reads the key after its create failed; a key purged meanwhile
        # (its Run just finished) or a read missed during a leader election lands here.
        return _Miss.GONE
    except Exception as exc:
        if errors.is_transient(exc):
            return _Miss.BUSY
        raise


async def _attempt_or_error(call: Awaitable[T]) -> T | Exception:
    try:
        return await call
    except Exception as exc:
        return exc


class Leases:
    """Acquire, renew and release leases for one process (``identity``)."""

    def __init__(self, store: LeaseStore, clock: Clock, identity: str, lease_seconds: float, *,
                 elapsed: Callable[[], float] = time.monotonic) -> None:
        self._kv = store.leases
        self._store = store
        self._key = store.names.lease_key
        self._subject = store.names.lease_subject
        self._stream = store.names.leases_stream
        self._clock = clock
        self._elapsed = elapsed
        self._seen: dict[str, tuple[int, float, float]] = {}
        """run_id -> (revision last read, elapsed time it was first read, last read)."""
        self._pruned_at = 0.0
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.key_ttl = max(OPEN_KEY_TTL_MIN, 12 * lease_seconds)
        self._ttl_header = str(int(self.key_ttl))

    async def _cas(self, run_id: str, value: LeaseValue, last: int, *,
                   ttl: bool = True) -> int:
        """Write ``value`` under ``run_id``'s key if its revision is ``last`` (0: no key);
        with the open key's TTL unless ``ttl`` is False. A lost compare-and-set raises
        nats-py's ``KeyWrongLastSequenceError``, as ``kv.update`` does."""
        headers = {HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: str(last)}
        if ttl:
            headers[HDR_TTL] = self._ttl_header
        try:
            ack = await self._store.publish_grouped(self._stream, self._subject(run_id),
                                                    _encode(value), headers)
        except nats.js.errors.APIError as exc:
            if errors.is_conflict(exc):
                raise nats.js.errors.KeyWrongLastSequenceError(exc.description) from exc
            raise
        return ack.seq

    def _value(self, run_id: str, acquired_at: datetime | None = None) -> LeaseValue:
        now = self._clock.now()
        return LeaseValue(
            run_id=run_id,
            holder=self.identity,
            expires_at=now + timedelta(seconds=self.lease_seconds),
            acquired_at=acquired_at or now,
        )

    async def current(self, run_id: str) -> tuple[int, LeaseValue] | None:
        """The lease on ``run_id`` as (revision, value), or None if nobody holds one."""
        try:
            entry = await self._kv.get(self._key(run_id))
        except nats.js.errors.NotFoundError:  # KeyNotFoundError and KeyDeletedError
            return None
        if entry.value is None or entry.operation in ("DEL", "PURGE"):
            self._seen.pop(run_id, None)
            return None
        revision = int(entry.revision or 0)
        self._observe(run_id, revision)
        subject = self._subject(run_id)
        try:
            return revision, lease_value_on(subject, entry.value)
        except ForeignMessage as exc:  # nobody's: anyone may take it at once
            self._store.foreign.noted("leases", subject, revision, exc.reason)
            return revision, LeaseValue(run_id=run_id, holder=UNREADABLE,
                                        expires_at=self._clock.now(),
                                        acquired_at=self._clock.now())

    def _observe(self, run_id: str, revision: int) -> None:
        now = self._elapsed()
        seen = self._seen.get(run_id)
        # A revision this process could not read for a while (the store did not answer, or
        # it did not look) counts again from now: its holder could not renew meanwhile
        # either, and must get a lease length to (simulation seed 622).
        first = (now if seen is None or seen[0] != revision
                 or now - seen[2] > self.lease_seconds * READ_GAP else seen[1])
        self._seen[run_id] = (revision, first, now)
        if len(self._seen) > _PRUNE_ABOVE and now - self._pruned_at > self.lease_seconds:
            self._prune(now)

    def _prune(self, now: float) -> None:
        """Forget leases not read for many lease lengths (their Runs finished)."""
        self._pruned_at = now
        horizon = now - 10 * self.lease_seconds
        for key in [k for k, (_, _, last) in self._seen.items() if last < horizon]:
            del self._seen[key]

    def expired(self, value: LeaseValue) -> bool:
        """Whether ``value`` (as :meth:`current` just read it) is no longer renewed.

        True once its revision has not changed for a lease length of this process's elapsed
        time (see the module docstring); wall clocks, the holder's or ours, play no part. A
        revision this process did not read for half a lease (the store did not answer) counts
        from its next read: after an outage the holder gets a lease length to renew, rather
        than losing its Run to the first replica to look (``READ_GAP``).
        """
        if value.holder in (FREE, UNREADABLE):
            return True  # given back unfinished (a drain), or foreign: anyone's at once
        seen = self._seen.get(value.run_id)
        if seen is None:
            return False
        return self._elapsed() - seen[1] >= self.lease_seconds

    async def acquire(self, run_id: str) -> tuple[Lease, str | None] | None:
        """Take the lease if it is free, expired, or already ours.

        Returns (lease, previous holder when taken over) or None when another live process
        holds it or won the race. Transient store trouble also returns None: the sweep tries
        again later.
        """
        key, value = self._key(run_id), self._value(run_id)
        created = await _attempt(self._kv.create(key, _encode(value), msg_ttl=self.key_ttl))
        if isinstance(created, int):
            return Lease(run_id, key, created, value), None
        if created is not _Miss.EXISTS:
            return None
        current = await _attempt(self.current(run_id))
        if not isinstance(current, tuple):
            return None  # gone between our create and our read: the next sweep takes it
        revision, held = current
        if held.holder != self.identity and not self.expired(held):
            return None
        updated = await _attempt(self._cas(run_id, value, revision))
        if not isinstance(updated, int):
            return None
        previous = held.holder if held.holder != self.identity else None
        return Lease(run_id, key, updated, value), previous

    async def renew(self, lease: Lease) -> Lease | None:
        """Extend the lease; None when it was lost (someone else's CAS won)."""
        value = self._value(lease.run_id, lease.value.acquired_at)
        try:
            revision = await self._cas(lease.run_id, value, lease.revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            return None
        return Lease(lease.run_id, lease.key, revision, value)

    async def release(self, lease: Lease, *, finished: bool) -> None:
        """Give the lease up.

        A finished Run's key is left to expire (its last write carried the open key's TTL,
        :data:`OPEN_KEY_TTL_MIN`): nothing is written. An unfinished Run's key stays with its
        holder ``FREE`` (a CAS on the revision, so only while it is still ours), without a
        TTL: the Run stays open, whatever the outage that follows, and any replica may take
        it at once.
        """
        if finished:
            return
        try:
            free = msgspec.structs.replace(lease.value, holder=FREE,
                                           expires_at=self._clock.now())
            await self._cas(lease.run_id, free, lease.revision, ttl=False)
        except nats.js.errors.KeyWrongLastSequenceError:
            pass
        except (nats.errors.Error, nats.js.errors.Error, OSError):
            log.debug("releasing lease %s failed; it expires by itself", lease.key, exc_info=True)

    async def announce(self, run_id: str) -> Lease | None:
        """Open the Run's key before the Run is stored, held by this process.

        Every unfinished Run has a key, so a process that starts finds them all without
        reading the history. The key IS the creator's lease (returned): the creator
        dispatches the Run without taking the lease again. If it dies before claiming, any
        replica takes the Run once the key has gone unrenewed for a lease length
        (:meth:`expired`). Announcing a Run that already has a key changes nothing and
        returns None (another replica announced it first and holds it).

        Written as one conditional publish on the key's subject (expected last sequence 0),
        not ``kv.create``: that one reads the key back after a refusal, a second request per
        Run that the announce does not need (a new Run's key never held a value before).
        """
        value = self._value(run_id)
        try:
            ack = await self._store.publish_grouped(
                self._stream, self._subject(run_id), _encode(value), self._open_headers())
        except nats.js.errors.APIError as exc:
            if not errors.is_conflict(exc):
                raise
            # The key exists. Ours, if this is a resend after a lost acknowledgement (the
            # server checks the expected sequence before the duplicate window).
            current = await self.current(run_id)
            if current is not None and current[1].holder == UNREADABLE:
                # a foreign message on a new Run's key: taken over, as the key would be
                taken = await _attempt(self._cas(run_id, value, current[0]))
                return (Lease(run_id, self._key(run_id), taken, value)
                        if isinstance(taken, int) else None)
            if current is None or current[1].holder != self.identity:
                return None
            return Lease(run_id, self._key(run_id), current[0], current[1])
        return Lease(run_id, self._key(run_id), ack.seq, value)

    async def announce_many(self, run_ids: Sequence[str]) -> list[Lease | Exception | None]:
        """:meth:`announce` for many Runs at once (per-Run results).

        One atomic batch; if one key already exists the batch is refused as a whole and sent
        again as pipelined publishes, and a key that exists is looked at on its own
        (:meth:`announce`: ours after a lost acknowledgement, or another replica's)."""
        values = [self._value(run_id) for run_id in run_ids]
        acks = await self._store.publish_batched(self._store.names.leases_stream, [
            Outgoing(self._subject(run_id), _encode(value), self._open_headers())
            for run_id, value in zip(run_ids, values, strict=True)])
        results: list[Lease | Exception | None] = []
        for run_id, value, ack in zip(run_ids, values, acks, strict=True):
            if not isinstance(ack, Exception):
                results.append(Lease(run_id, self._key(run_id), ack.seq, value))
            elif errors.is_conflict(ack):
                results.append(await _attempt_or_error(self.announce(run_id)))
            else:
                results.append(ack)
        return results

    def _open_headers(self) -> dict[str, str]:
        """A new key: only if it has none yet, living :attr:`key_ttl` unless renewed."""
        return {HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: "0", HDR_TTL: self._ttl_header}

    async def forget(self, run_id: str) -> None:
        """Close the key of a Run that was announced but never stored."""
        await self._kv.purge(self._key(run_id), msg_ttl=CLOSED_MARKER_TTL)

    async def open_runs(self) -> dict[str, LeaseValue]:
        """run_id -> lease value of every open Run: the newest message of each key of the
        bucket, read by an ordered consumer, closed keys dropped.

        Not nats-py's ``watchall``: it decides the bucket is read when the consumer's info
        reports nothing pending and nothing has reached the subscription yet, but the server
        may answer that info before the messages it already delivered arrive, so a busy
        process read an empty bucket and lost track of every open Run. Here the read ends at
        a message the server delivered with nothing pending after it, or when the server
        says it has delivered nothing (an empty bucket) or only what was already applied
        (the rest expired meanwhile).
        """
        found: dict[str, LeaseValue] = {}
        last = _LastDelivered()

        async def on_message(msg: Msg) -> None:
            meta = msg.metadata
            headers = msg.headers or {}
            if headers.get(HDR_KV_OPERATION) in ("DEL", "PURGE") or (
                    HDR_MARKER_REASON in headers) or not msg.data:
                found.pop(msg.subject, None)
            else:
                try:
                    found[msg.subject] = lease_value_on(msg.subject, msg.data)
                except ForeignMessage as exc:
                    # not a lease of ours, on the key of a Run that may be open: the key
                    # names the Run, which stays known, its lease anyone's to take
                    self._store.foreign.noted("leases", msg.subject, meta.sequence.stream,
                                              exc.reason)
                    run_id = lease_run_id(msg.subject)
                    if run_id is not None:
                        found[msg.subject] = LeaseValue(
                            run_id=run_id, holder=UNREADABLE, expires_at=self._clock.now(),
                            acquired_at=self._clock.now())
            last.note(meta.sequence.consumer, meta.num_pending)

        names = self._store.names
        sub = await self._store.follow(names.leases_stream, names.leases_filter, on_message,
                                       heartbeat=OPEN_RUNS_HEARTBEAT)
        try:
            while not last.caught_up.is_set():
                info = await sub.consumer_info()
                delivered = info.delivered.consumer_seq if info.delivered else 0
                if not info.num_pending and (delivered or 0) == last.consumer_seq:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(last.caught_up.wait(), OPEN_RUNS_RECHECK)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        return {value.run_id: value for value in found.values()}


class _LastDelivered:
    """Where :meth:`Leases.open_runs` has got to in its consumer's deliveries."""

    def __init__(self) -> None:
        self.consumer_seq = 0
        self.caught_up = asyncio.Event()

    def note(self, consumer_seq: int, pending: int | None) -> None:
        self.consumer_seq = consumer_seq
        if not pending:
            self.caught_up.set()

"""The Run follower and this replica's own writes (jetstream/runlog.py, ``RunLog.followed``).

A replica applies what it writes to its ledger at once (read your writes); the follower
delivers the same event back later, and often before the write's acknowledgement. Decoding
that copy again cost a tenth of a busy replica's CPU, so an event followed on a subject this
replica is writing to waits until the write is answered. These tests force the order that
matters (the followed copy first) on a real server and check both halves: this replica's
own events are never decoded again, and another writer's event held meanwhile is applied,
not lost.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import pytest

from nats_scheduler import ManualClock
from nats_scheduler.core import runcore
from nats_scheduler.core.events import RunEventType, encode
from nats_scheduler.jetstream.errors import Conflict
from nats_scheduler.jetstream.follower import delivery_position
from nats_scheduler.names import HDR_EXPECTED_LAST_SUBJECT_SEQUENCE, HDR_MSG_ID, random_run_id
from nats_scheduler.projections.ledger import Ledger
from nats_scheduler.provider import NatsSchedulerProvider
from nats_scheduler.seam import RunPayload, RunState, Trigger
from tests.harness.servers import unique_prefix
from tests.providers import eventually, running

pytestmark = pytest.mark.anyio

NOW = datetime(2031, 5, 6, 2, 0, tzinfo=UTC)

Append = Callable[..., Awaitable[tuple[int, bool]]]


def _followed_first(provider: NatsSchedulerProvider, monkeypatch: pytest.MonkeyPatch,
                    before: Callable[[], Awaitable[None]] | None = None) -> None:
    """Every store append returns only once the Run follower has delivered past what it
    stored: the followed copy always arrives before the write is answered. ``before`` runs
    ahead of the real append (a rival's write)."""
    store = provider.store
    runtime = provider.runtime
    assert runtime is not None
    follower = runtime.followers[1]
    real: Append = store.append

    async def append(*args: object, **kwargs: object) -> tuple[int, bool]:
        if before is not None:
            await before()
        seq, duplicate = await real(*args, **kwargs)
        await eventually(lambda: follower.applied_seq >= seq, timeout=10)
        return seq, duplicate

    monkeypatch.setattr(store, "append", append)


def _decoded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """(sequence, run ID) of every followed event the ledger decoded and applied."""
    seen: list[tuple[int, str]] = []
    real = Ledger.apply_event

    def apply_event(self: Ledger, seq: int, event: RunEventType,
                    subject_ids: tuple[str, str]) -> bool:
        seen.append((seq, event.run.run_id))
        return real(self, seq, event, subject_ids)

    monkeypatch.setattr(Ledger, "apply_event", apply_event)
    return seen


def _created(provider: NatsSchedulerProvider, deployment: str) -> runcore.RunCreated:
    return runcore.create(run_id=random_run_id(), deployment_id=deployment,
                          trigger=Trigger.RUN_NOW, due_at=None,
                          payload=RunPayload("t", deployment), now=NOW,
                          actor=provider.identity)


async def test_own_events_followed_before_their_acknowledgement_are_not_decoded_again(
    nats_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with running(nats_url, unique_prefix(), clock=ManualClock(NOW)) as provider:
        decoded = _decoded(monkeypatch)
        _followed_first(provider, monkeypatch)
        runlog = provider.runlog
        created = _created(provider, "own")
        stored = await runlog.create(created, msg_id=f"{created.run.run_id}:0")
        assert stored.created
        claim = runcore.claim(stored.run, holder=provider.identity, now=NOW)
        seq = await runlog.append(stored.seq, claim)
        started = runcore.session_started(claim.run, session_id="s-1", now=NOW,
                                          actor=provider.identity)
        last = await runlog.append(seq, started)

        run_id = created.run.run_id
        assert [s for s, run in decoded if run == run_id] == []
        held = provider.ledger.get(run_id)
        assert held is not None and held.session_id == "s-1"
        assert held.state == RunState.DISPATCHING
        # and nothing of them is kept once followed: the next event is told apart again
        assert runlog.own_event(provider.store.names.run_subject("own", run_id), last) is False


async def test_a_rival_event_followed_while_a_write_waits_is_applied_when_it_is_answered(
    nats_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with running(nats_url, unique_prefix(), clock=ManualClock(NOW)) as provider:
        runlog = provider.runlog
        created = _created(provider, "rival")
        stored = await runlog.create(created, msg_id=f"{created.run.run_id}:0")
        subject = provider.store.names.run_subject("rival", created.run.run_id)
        runtime = provider.runtime
        assert runtime is not None
        follower = runtime.followers[1]
        rival = runcore.claim(stored.run, holder="rival-replica", now=NOW)
        rival_seq: list[int] = []

        async def rival_writes_first() -> None:
            if rival_seq:
                return
            ack = await provider.store.acks.publish(subject, encode(rival), {
                HDR_MSG_ID: "rival-claim",
                HDR_EXPECTED_LAST_SUBJECT_SEQUENCE: str(stored.seq)})
            rival_seq.append(ack.seq)
            # followed while our append is in flight on the same subject: held
            await eventually(lambda: follower.applied_seq >= ack.seq, timeout=10)
            held = provider.ledger.get(created.run.run_id)
            assert held is not None and held.holder is None, "applied before the write ended"

        _followed_first(provider, monkeypatch, before=rival_writes_first)
        ours = runcore.claim(stored.run, holder=provider.identity, now=NOW)
        with pytest.raises(Conflict):
            await runlog.append(stored.seq, ours)

        held = provider.ledger.get(created.run.run_id)
        assert held is not None and held.holder == "rival-replica"
        assert held.state == RunState.DISPATCHING


class _Reply:
    def __init__(self, reply: str) -> None:
        self.reply = reply


@pytest.mark.parametrize("reply, expected", [
    ("$JS.ACK.S.c.1.42.7.1796348525926095399.3", (42, 3)),
    ("$JS.ACK.dom.acchash.S.c.1.42.7.1796348525926095399.3", (42, 3)),
    ("$JS.ACK.dom.acchash.S.c.1.42.7.1796348525926095399.3.rnd", (42, 3)),
])
def test_the_position_of_a_delivery_is_read_as_nats_py_reads_it(
    reply: str, expected: tuple[int, int],
) -> None:
    from nats.aio.msg import Msg

    msg = Msg(_client=None, subject="x", reply=reply)  # type: ignore[arg-type]
    meta = msg.metadata
    assert delivery_position(msg) == expected == (meta.sequence.stream, meta.num_pending)

"""The one mapping from engine errors to the seam's errors, pinned."""

from __future__ import annotations

import nats.errors
import nats.js.errors
import pytest

from nats_scheduler.jetstream import errors
from nats_scheduler.seam import SchedulerUnavailable
from tests.providers import assert_clean


def api_error(cls: type[nats.js.errors.APIError], code: int, err_code: int) -> BaseException:
    return cls(code=code, err_code=err_code, description="engine text with $JS and stream")


TRANSIENT = [
    nats.errors.TimeoutError(),
    nats.errors.NoRespondersError(),
    nats.errors.ConnectionClosedError(),
    nats.errors.ConnectionReconnectingError(),
    nats.errors.StaleConnectionError(),
    nats.errors.NoServersError(),
    nats.js.errors.NoStreamResponseError(),
    TimeoutError(),
    ConnectionResetError(),
    api_error(nats.js.errors.ServiceUnavailableError, 503, 10008),
    api_error(nats.js.errors.ServerError, 500, 10118),
    api_error(nats.js.errors.BadRequestError, 400, 10158),
]
PERMANENT = [
    nats.js.errors.KeyNotFoundError(),  # the KV layer's client-side errors carry no code
    api_error(nats.js.errors.BadRequestError, 400, 10071),
    api_error(nats.js.errors.BadRequestError, 400, 10164),
    api_error(nats.js.errors.NotFoundError, 404, 10037),
    api_error(nats.js.errors.BadRequestError, 400, 10058),
    api_error(nats.js.errors.APIError, 400, 10023),
    # the server sends "insufficient resources" as a 503, the class of transient answers:
    # the code decides (the store is full; retrying for seconds will not make room)
    api_error(nats.js.errors.ServiceUnavailableError, 503, 10023),
    api_error(nats.js.errors.ServiceUnavailableError, 503, 10047),
    ValueError("bug"),
]


@pytest.mark.parametrize("exc", TRANSIENT, ids=lambda e: type(e).__name__)
def test_transient_errors_are_retried(exc: BaseException) -> None:
    assert errors.is_transient(exc)


@pytest.mark.parametrize("exc", PERMANENT, ids=lambda e: type(e).__name__)
def test_other_errors_are_not_retried(exc: BaseException) -> None:
    assert not errors.is_transient(exc)


def test_wrong_last_sequence_is_a_conflict_by_code_not_text() -> None:
    assert errors.is_conflict(api_error(nats.js.errors.BadRequestError, 400, 10071))
    # a clustered stream answers a race with a publish still in flight with 10164: the same
    # conflict (tests/faults/test_faults_cluster.py reproduces it on three nodes)
    assert errors.is_conflict(api_error(nats.js.errors.BadRequestError, 400, 10164))
    assert not errors.is_conflict(api_error(nats.js.errors.BadRequestError, 400, 10058))
    assert errors.is_not_found(api_error(nats.js.errors.APIError, 404, 10037))


def test_seam_errors_keep_engine_text_out_of_the_message_but_chained() -> None:
    cause = api_error(nats.js.errors.ServiceUnavailableError, 503, 10008)
    error = errors.unavailable("could not store an event", cause)
    assert isinstance(error, SchedulerUnavailable)
    assert error.__cause__ is cause
    assert_clean(str(error))


def test_a_full_store_says_so_in_astrabox_words() -> None:
    cause = api_error(nats.js.errors.ServiceUnavailableError, 503, 10023)
    error = errors.unavailable("could not store an event", cause)
    assert isinstance(error, SchedulerUnavailable) and error.__cause__ is cause
    assert str(error).startswith("the scheduler store is full: could not store an event")
    assert_clean(str(error))
    assert "is full" not in str(errors.unavailable("x", nats.errors.TimeoutError()))


def test_what_makes_the_store_try_another_server() -> None:
    """No answer, no quorum, or a Msg-Id stuck "in process" on a leader cut off from its
    followers: another node of the cluster may do better. A refusal on the merits may not."""
    assert errors.unanswered(nats.errors.TimeoutError())
    assert errors.unanswered(api_error(nats.js.errors.ServiceUnavailableError, 503, 10008))
    assert errors.unanswered(api_error(nats.js.errors.APIError, 409, 10158))
    assert not errors.unanswered(api_error(nats.js.errors.APIError, 400, 10071))
    assert not errors.unanswered(api_error(nats.js.errors.ServerError, 500, 10118))

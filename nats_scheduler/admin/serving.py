"""Replicas that fire but do not serve the admin service, in words: why, and the fix.

Every replica's key in the replicas bucket says whether it serves the admin service
(``core/serving.py``). ``status``, the console, ``doctor`` and an action that no replica
answered read it (``jetstream/replica_reads.py``) and say it with these words, so a replica
whose admin service the server refuses is never invisible: it is counted alive, and the
operator reads why it does not serve actions and which setting fixes it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..core.serving import Serving, serves, serving_of
from ..settings import NatsSettings

_ENV = NatsSettings.ENV
LOGIN_SETTINGS = (f"{_ENV['service_user']} and {_ENV['service_password']}, "
                  f"or {_ENV['service_creds']}")
"""The settings of the admin service's own login, as an operator sets them."""

WHY_NOT = {
    Serving.REFUSED: (
        f"refused by the server: it runs without the service login (set {LOGIN_SETTINGS}), "
        "and the server's permissions keep the scheduler's own login off the admin service"),
    Serving.LOGIN_REFUSED: (
        f"refused by the server: its service login ({_ENV['service_user']}) may not serve "
        "the admin service; give that user the admin service in the server's configuration"),
    Serving.FAILED: ("could not start (its log says why: a service login that cannot "
                     "connect, for one)"),
    Serving.OFF: f"turned off ({_ENV['admin_service']}=0)",
    Serving.STOPPED: "stopped while the process goes on",
    Serving.STARTING: "not started yet",
    Serving.YES: ("it says it serves, but did not answer (stopped without leaving its key, "
                  "or too busy to answer in time)"),
}
"""Why a replica that did not answer serves no admin service, by the word in its key."""


SHOWN_WORD = 40
"""Characters of a word this version does not know that are shown (a key is anyone's who
may write the bucket: a long one must not swamp a status line)."""


def why_not(word: str | None) -> str:
    """Why a replica whose key holds ``word`` did not answer the admin service."""
    known = serving_of(word)
    if known is None:
        return ("it does not say (a version from before it did)" if word is None
                else f"it says {word[:SHOWN_WORD]!r}")
    return WHY_NOT[known]


def serving_cell(word: str | None, *, answered: bool) -> str:
    """A table's cell: ``yes`` (it answered), ``no`` (its key says it does not serve),
    ``silent`` (its key says it serves, but it did not answer), ``-`` (it does not say)."""
    if answered:
        return "yes"
    says = serves(word)
    return "-" if says is None else "silent" if says else "no"


def reasons(words: Sequence[str | None]) -> str:
    """The reasons of replicas that do not serve, each once: ``refused by the server: ...``
    for one reason, ``2 refused by the server: ...; 1 turned off (...)`` for several."""
    counts = Counter(why_not(w) for w in words)
    if len(counts) == 1:
        return next(iter(counts))
    return "; ".join(f"{n} {why}" for why, n in counts.most_common())


def none_serves(words: Sequence[str | None]) -> str | None:
    """What an action that no replica answered says, when live replicas are known (their
    keys' words) and every one says it does not serve; None otherwise (nobody alive, or
    a replica that serves or does not say: the old answer holds)."""
    if not words or any(serves(w) is not False for w in words):
        return None
    count = len(words)
    alive = "1 scheduler replica is" if count == 1 else f"{count} scheduler replicas are"
    return f"{alive} alive but none serves actions: {reasons(words)}"


def refused_at_start(prefix: str, identity: str, *, own_login: bool) -> str:
    """The ERROR a replica logs when the server refused its admin service's subscriptions:
    which setting is missing (or wrong), and why the server refuses it."""
    head = (f"the admin service for prefix {prefix} does not serve (replica {identity}): "
            "the server refused its subscriptions")
    if own_login:
        fix = (f"its service login ({_ENV['service_user']}) may not serve the admin service: "
               "give that user the admin service in the server's configuration (user "
               "`service` of the shipped nats-server.conf)")
    else:
        fix = (f"the service login is not set ({LOGIN_SETTINGS}), and the server's "
               "permissions keep the scheduler's own login off the admin service: set it to "
               "the service login (user `service` of the shipped nats-server.conf)")
    return (f"{head}: {fix}. This replica still fires; console and command-line actions "
            "need a replica that serves")


__all__ = ["LOGIN_SETTINGS", "WHY_NOT", "none_serves", "reasons", "refused_at_start",
           "serving_cell", "why_not"]

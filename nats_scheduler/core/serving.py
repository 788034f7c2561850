"""Whether a replica serves the admin service, and why not: one short word per replica.

Every replica puts it in its key of the replicas bucket at each beat
(``jetstream/presence.py``), so ``status``, the console, the doctor and an action that
nobody answered can count the replicas that fire but do not serve: a replica whose admin
service the server refuses keeps firing, and without this word it would be invisible. The
words an operator reads (why, and the fix) are ``admin/serving.py``'s. Pure.
"""

from __future__ import annotations

from enum import StrEnum


class Serving(StrEnum):
    """The stored word (a value on the wire: never rename one, add new ones freely)."""

    YES = "serving"
    """Its admin service answers (every endpoint's subscription accepted by the server)."""
    STARTING = "starting"
    """Its admin service has not started yet (the process is starting)."""
    REFUSED = "refused"
    """The server refused its subscriptions on the scheduler's own login: it runs without
    the service login, which the shipped server configuration requires."""
    LOGIN_REFUSED = "login-refused"
    """The server refused its subscriptions on its service login: that user's permissions
    do not cover the admin service."""
    FAILED = "failed"
    """It could not start (its service login could not connect, for one)."""
    OFF = "off"
    """Turned off by its settings (a host that serves it elsewhere)."""
    STOPPED = "stopped"
    """Stopped while the process goes on."""


def serving_of(word: str | None) -> Serving | None:
    """The stored word as a :class:`Serving`; None for a replica of a version from before
    the word (it served, or it did not answer) or a word of a newer version."""
    if word is None:
        return None
    try:
        return Serving(word)
    except ValueError:
        return None


def serves(word: str | None) -> bool | None:
    """Whether a replica whose key holds ``word`` serves actions; None: it does not say (a
    version from before the word, or a word this version does not know)."""
    if word is None:
        return None
    return word == Serving.YES

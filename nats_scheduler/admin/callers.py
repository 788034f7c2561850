"""Who sent an admin request, as the NATS server proves it (its ``Nats-Request-Info`` header).

The admin service can run on a connection of its own, in an account that holds nothing but
the service's users (``nats-server.conf``: account ``SCHED_ADMIN``, user ``service``).
Operators reach it through a service import with ``share: true``, and on that crossing the
server writes the header with the account and user the sender logged in as, removing any
header of that name the client sent (nats-server 2.12.6/2.11.15 and later:
CVE-2026-33223/33246). Inside the service's own account no import is crossed and a header
would be the client's word, so the header is believed only when the service has that
connection to itself (``proves``), and an action arriving there without it is refused.

Without a login of its own (development, or a server without the accounts) the service
shares the provider's connection: nothing is proven, and an action records the name the
client gives, as before schema 3.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

import msgspec

from ..core.events import Caller, Hold
from ..names import HDR_REQUEST_INFO
from .api import AdminError, ErrorCode
from .service_errors import required

UNPROVEN = ("the server did not say who sent this request: actions are taken only from users "
            "it authenticated (through the account that imports the admin service)")


class _RequestInfo(msgspec.Struct, frozen=True):
    """The fields of the server's ``ClientInfo`` the service records (the rest is ignored)."""

    acc: str = ""
    user: str = ""


_decoder = msgspec.json.Decoder(_RequestInfo)


def caller_of(headers: Mapping[str, str] | None) -> Caller | None:
    """The account and user in a request's ``Nats-Request-Info`` header, or None."""
    raw = (headers or {}).get(HDR_REQUEST_INFO)
    if not raw:
        return None
    try:
        info = _decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if not info.user or not info.acc:
        return None
    return Caller(user=info.user, account=info.acc)


def proven_caller(headers: Mapping[str, str] | None, *, proves: bool) -> Caller | None:
    """Who sent an action: the server's word when the service can believe it (``proves``),
    None when it cannot (a shared connection). Refuses an unproven action where proof is
    expected: the trail must never hold an action without its sender."""
    if not proves:
        return None
    caller = caller_of(headers)
    if caller is None:
        raise AdminError(ErrorCode.FORBIDDEN, UNPROVEN)
    return caller


def stated(value: str | None) -> str | None:
    """An ``on behalf of`` name as stored: trimmed, None when empty."""
    text = (value or "").strip()
    return text or None


def requester(by: str, on_behalf_of: str | None,
              caller: Caller | None) -> tuple[str, str | None]:
    """``requested_by`` of a Run now or Replay, and whom it was said to be for: the user the
    server authenticated and the stated name (``--by``) apart; without proof, the name the
    client gives as who asked, as before."""
    by = required(by, "by")
    behalf = stated(on_behalf_of)
    if caller is None:
        return behalf or by, None
    return caller.user, behalf if behalf != caller.user else None


def who_text(by: str, caller: Caller | None, on_behalf_of: str | None) -> str:
    """How the console and the command line show who acted: the proven user marked as such,
    and a stated name always as "on behalf of", never as the actor."""
    who = f"{caller.user} (authenticated)" if caller is not None else by
    return f"{who} on behalf of {on_behalf_of}" if on_behalf_of else who


def held_by(hold: Hold) -> str:
    """:func:`who_text` of a hold."""
    return who_text(hold.by, hold.caller, hold.on_behalf_of)


def until_text(until: datetime | None) -> str:
    """`` until 2026-12-05 14:00:00Z`` for a hold that ends by itself, else ``""``: shown
    wherever the hold is."""
    if until is None:
        return ""
    return f" until {until.astimezone(UTC):%Y-%m-%d %H:%M:%S}Z"

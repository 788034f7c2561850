"""Holding or releasing every Schedule a filter matches: ``schedules.hold_bulk`` and
``schedules.release_bulk`` of the admin service.

Each Schedule changes through the provider, one event each with who asked and why, in
deployment-ID order. A page of a bulk action is bounded twice: by the ``limit`` asked for
(at most :data:`MAX_BULK_PAGE`) and by what its ID lists may cost in the answer, half the
server's largest message.
"""

from __future__ import annotations

import msgspec

from ..core import validation
from ..core.events import Caller
from .api import AdminError, BulkAction, BulkResult, ErrorCode
from .bounded import PAGE_BYTES_MIN
from .callers import stated
from .host import AdminHost
from .service_errors import required
from .views import matches

MAX_BULK_PAGE = validation.MAX_BULK_PAGE
"""The most Schedules one page of a bulk action may change (a page answers in seconds)."""

_encoder = msgspec.json.Encoder()


def check_bulk_limit(limit: int) -> None:
    if isinstance(limit, bool) or not 1 <= limit <= MAX_BULK_PAGE:
        raise AdminError(ErrorCode.INVALID_REQUEST,
                         f"a bulk page's limit must be between 1 and {MAX_BULK_PAGE}")


async def change_matching(host: AdminHost, req: BulkAction, held: bool,
                          caller: Caller | None = None) -> BulkResult:
    """Hold or release the matching Schedules in deployment-ID order, after ``after``.

    With ``limit``: at most that many, and no more than half the server's largest
    message of IDs, then ``next_after`` says where the next page starts (the cursor
    walks the filter, which an action does not change). Without: all of them, the ID
    lists cut where they would no longer fit, the counts complete (``truncated``).
    """
    text = required(req.filter, "a bulk action's filter")
    by, reason = required(req.by, "by"), required(req.reason, "reason")
    if req.limit is not None:
        check_bulk_limit(req.limit)
    change = host.hold if held else host.release
    largest = host.store.max_payload
    budget = largest // 2 if largest else PAGE_BYTES_MIN
    chosen = sorted(
        (r for r in host.schedules.all()
         if not r.deleted and (req.after is None or r.deployment_id > req.after)
         and matches(r, text)),
        key=lambda r: r.deployment_id)
    changed: list[str] = []
    unchanged: list[str] = []
    counts = [0, 0]  # changed, unchanged
    size, truncated, next_after = 0, False, None
    for index, record in enumerate(chosen):
        dep = record.deployment_id
        cost = len(_encoder.encode(dep)) + 1
        if req.limit is not None and index and (index >= req.limit
                                                or size + cost > budget):
            next_after = chosen[index - 1].deployment_id
            break
        done = False
        if (record.hold is not None) != held:
            ends = {"until": req.until} if held and req.until is not None else {}
            after = await change(dep, by=by, reason=reason, caller=caller,
                                 on_behalf_of=stated(req.on_behalf_of), **ends)
            done = (after.hold is not None) == held
        counts[0 if done else 1] += 1
        if size + cost > budget:
            truncated = True
            continue
        size += cost
        (changed if done else unchanged).append(dep)
    return BulkResult(changed=changed, unchanged=unchanged, changed_count=counts[0],
                      unchanged_count=counts[1], next_after=next_after,
                      truncated=truncated)

"""Read a deployment's whole Run history page by page, and judge it against what was made.

Guarantee 7 of the provider guide ("list_runs returns a Deployment's Runs of every trigger,
newest first") is a promise about the WHOLE history as a reader pages through it, not about
one page: a history whose every page looked right once lost three quarters of its Runs
when read page after page. Every test of the history reads it to the end with
:func:`walk` and compares it with the Runs it made with :func:`assert_whole`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime
from typing import Protocol


class Listed(Protocol):
    """What a page lists of a Run (the seam's ``Run``, the admin API's view, a CLI row)."""

    @property
    def run_id(self) -> str: ...

    @property
    def created_at(self) -> datetime: ...


PageReader = Callable[[str | None, int], Awaitable[list[Listed]]]
"""Reads one page: ``(before, limit) -> Runs``, the way a client pages."""


def key(run: Listed) -> tuple[datetime, str]:
    """The history's order: ``created_at``, then ``run_id`` (both descending on a page)."""
    return (run.created_at, run.run_id)


async def walk(read: PageReader, limit: int, *,
               between: Callable[[], Awaitable[None]] | None = None,
               max_pages: int = 100_000) -> list[list[Listed]]:
    """Every page from the newest on, each read with the last Run of the one before as its
    ``before`` cursor, until a page is short; ``between`` runs after each full page (to
    change the history while it is read)."""
    pages: list[list[Listed]] = []
    before: str | None = None
    for _ in range(max_pages):
        page = await read(before, limit)
        pages.append(page)
        if len(page) < limit:
            return pages
        before = page[-1].run_id
        if between is not None:
            await between()
    raise AssertionError(f"the history did not end within {max_pages} pages")


def assert_whole(pages: list[list[Listed]], made: Iterable[Listed], limit: int, *,
                 said_last: bool = False) -> None:
    """``pages`` list exactly the Runs ``made``, each once, newest first by
    ``(created_at, run_id)``, every page full but the last (``said_last``: the reader was
    told the last page was the last, so it may be full too)."""
    listed = [run for page in pages for run in page]
    ids = [run.run_id for run in listed]
    repeated = {i for i in ids if ids.count(i) > 1} if len(set(ids)) != len(ids) else set()
    assert not repeated, f"listed more than once: {sorted(repeated)[:5]}"
    expected = sorted({run.run_id: run for run in made}.values(), key=key, reverse=True)
    missing = {r.run_id for r in expected} - set(ids)
    extra = set(ids) - {r.run_id for r in expected}
    assert not missing and not extra, (
        f"{len(missing)} of {len(expected)} Runs not listed, {len(extra)} listed that were "
        f"not made; page sizes {[len(p) for p in pages]}")
    assert ids == [r.run_id for r in expected], "listed out of order"
    assert [key(r) for r in listed] == [key(r) for r in expected], "keys differ from the Runs'"
    sizes = [len(page) for page in pages]
    assert all(size == limit for size in sizes[:-1]) and (said_last or sizes[-1] < limit), (
        f"a page short before the end: {sizes}")

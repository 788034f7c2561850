"""A view drawn from one answer of the admin service, reloaded one request at a time.

The Cluster view (``cluster.status``) and the Load view (``schedules.load``) each show one
answer. Under load an answer can take longer than the live feed's reload interval, and a
reload cancelling the one before would never show anything: so a reload asked for while one
waits is remembered and done once the answer is in, never over it.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from textual import work

from ..messages import AnswerLoaded
from .base import ConsoleScreen


class OneAnswerScreen(ConsoleScreen):
    """Subclasses say what to ask (:meth:`ask`) and what to do with the answer
    (:meth:`answered`); :attr:`asking` names the request in failure notices."""

    asking = "Loading"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._loading = False
        self._again = False

    def ask(self) -> Awaitable[object]:
        """The backend call whose answer this view shows."""
        raise NotImplementedError

    def answered(self, answer: object) -> None:
        """Keep the answer and draw it."""

    def reload(self, dirty: set[str | None] | None) -> None:
        if self._loading:
            self._again = True  # once more when the answer is in
            return
        self._loading = True
        self._load()

    @work(group="load", exit_on_error=False)
    async def _load(self) -> None:
        try:
            answer = await self.guarded(self.asking, self.ask())
            if answer is not None:
                self.post_message(AnswerLoaded(answer))
        finally:
            self.call_later(self._loaded)

    def _loaded(self) -> None:
        self._loading = False
        if self._again:
            self._again = False
            self.request_reload({None})

    def on_answer_loaded(self, message: AnswerLoaded) -> None:
        self.answered(message.answer)

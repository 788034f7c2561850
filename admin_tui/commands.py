"""The command palette (Ctrl+P) lists every key binding of the current screen.

The palette and the footer therefore always agree, and an action the user may not run is
listed with the reason instead of its key.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import cast

from textual.command import DiscoveryHit, Hit, Hits, Provider

from .context import ConsoleContext
from .screens.base import OPERATOR_ACTIONS, disabled_text


class ConsoleCommands(Provider):
    def _entries(self) -> Iterator[tuple[str, str, object]]:
        ctx = cast(ConsoleContext, self.app)
        seen: set[str] = set()
        for key, active in self.screen.active_bindings.items():
            binding = active.binding
            if not binding.description or binding.action in seen:
                continue
            seen.add(binding.action)
            shown_key = self.app.get_key_display(binding)
            if binding.action in OPERATOR_ACTIONS and not ctx.can_act:
                help_text = disabled_text(binding.description, ctx.act_reason)
                callback = partial(self.app.notify, help_text, title="Read-only",
                                   severity="warning")
            else:
                help_text = f"key: {shown_key or key}"
                callback = partial(self.app.run_action, binding.action, active.node)
            yield binding.description, help_text, callback

    async def discover(self) -> Hits:
        for title, help_text, callback in self._entries():
            yield DiscoveryHit(title, callback, help=help_text)  # type: ignore[arg-type]

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback in self._entries():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback,  # type: ignore[arg-type]
                          help=help_text)

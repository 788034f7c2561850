"""Pilot helpers shared by the console tests: wait for a condition, read a cell, confirm.

Every wait polls the running console with a deadline (never a fixed sleep) and fails with
what it waited for.
"""

from __future__ import annotations

from collections.abc import Callable

from textual.pilot import Pilot
from textual.widgets import Input

from admin_tui.dialogs.confirm import ConfirmDialog
from admin_tui.widgets.keyed_table import KeyedTable
from admin_tui.widgets.virtual_table import VirtualTable

WAIT = 15.0


async def until(pilot: Pilot[None], check: Callable[[], object], timeout: float = WAIT) -> None:
    """Let the console run until ``check()`` holds; fail after ``timeout`` seconds."""
    for _ in range(int(timeout / 0.05)):
        if check():
            return
        await pilot.pause(0.05)
    assert check(), f"condition not met within {timeout} s"


def cell(table: KeyedTable | VirtualTable, key: str, column: str) -> str:
    """The plain text of one cell ('' if the row is not there)."""
    if isinstance(table, VirtualTable):
        return table.cell_text(key, column)
    if key not in table.row_keys():
        return ""
    index = [c.key.value for c in table.ordered_columns].index(column)
    return str(table.get_row(key)[index])


async def confirm(pilot: Pilot[None], reason: str | None = None) -> None:
    """Fill in the open confirmation dialog's reason and confirm with Enter."""
    await until(pilot, lambda: isinstance(pilot.app.screen, ConfirmDialog))
    if reason is not None:
        pilot.app.screen.query_one("#reason", Input).value = reason
    await pilot.press("enter")
    await until(pilot, lambda: not isinstance(pilot.app.screen, ConfirmDialog))

"""Updating a Static only when what it shows changes.

Why: ``Static.update`` lays the whole screen out again. Under a herd of events the same
label and the same summary were set many times a second with the same text, and each time
the screen was laid out and drawn for nothing.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


def update_changed(widget: Static, content: Text | str) -> None:
    """``widget.update(content)`` unless it already shows equal content."""
    if widget.content != content:
        widget.update(content)

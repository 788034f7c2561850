"""A table that renders only the rows on screen (Textual's line API).

Why not a ``DataTable``: it builds and keeps every row's cells, and replacing 100,000 rows
costs seconds and hundreds of megabytes. This table holds only the ordered row keys; the
cells of a row are asked for (``cells_of``) when that row is drawn, so a refresh costs the
rows visible, whatever the number of rows.

It looks like the console's other tables (it uses DataTable's component classes and
styles: header, zebra stripes, cursor) and keeps the operator's cursor on the same row
(the same key, at the same height on screen) when the rows change under it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

Column = tuple[str, str, int]
"""(key, label, width in cells)."""

CellsOf = Callable[[str], Sequence[Text]]

PAD = 1
"""Blank cells either side of every cell, as DataTable draws them."""


class VirtualTable(ScrollView, can_focus=True):
    """Rows are keys; ``cells_of(key)`` builds a row's cells when it is drawn."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "datatable--header", "datatable--cursor", "datatable--even-row",
        "datatable--odd-row",
    }
    DEFAULT_CSS = """
    VirtualTable {
        background: $surface;
        color: $foreground;
        height: 1fr;
        &:focus {
            background-tint: $foreground 5%;
            & > .datatable--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .datatable--header {
                background-tint: $foreground 5%;
            }
        }
        &:dark > .datatable--even-row {
            background: $surface-darken-1 40%;
        }
        & > .datatable--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        & > .datatable--even-row {
            background: $surface-lighten-1 50%;
        }
        & > .datatable--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "edge(0)", "First", show=False),
        Binding("end", "edge(1)", "Last", show=False),
    ]

    class CursorMoved(Message):
        """The cursor is on another row (or the row under it is another Schedule)."""

        def __init__(self, table: VirtualTable, key: str | None) -> None:
            super().__init__()
            self.table = table
            self.key = key

    def __init__(self, columns: Sequence[Column], cells_of: CellsOf, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.columns = list(columns)
        self.cells_of = cells_of
        self._keys: list[str] = []
        self._index: dict[str, int] | None = None
        self.cursor_row = 0
        self._width = sum(width + 2 * PAD for _, _, width in self.columns)

    # ------------------------------------------------------------------ rows

    @property
    def row_count(self) -> int:
        return len(self._keys)

    def row_keys(self) -> list[str]:
        return list(self._keys)

    @property
    def selected_key(self) -> str | None:
        """The key of the row under the cursor, or None when the table is empty."""
        if not self._keys:
            return None
        return self._keys[min(self.cursor_row, len(self._keys) - 1)]

    def index_of(self, key: str) -> int | None:
        if self._index is None:
            self._index = {k: i for i, k in enumerate(self._keys)}
        return self._index.get(key)

    def _find(self, key: str) -> int | None:
        """Where one key is, without building the index for it: a scan of a million rows
        (a filter cleared, the cursor's row looked for) is a hundredth of building it."""
        if self._index is not None:
            return self._index.get(key)
        try:
            return self._keys.index(key)
        except ValueError:
            return None

    def set_rows(self, keys: list[str], *, changed: set[str] | None = None) -> None:
        """Show the rows ``keys`` in this order; the cursor stays on its row if still shown.

        The list is kept, not copied: the caller hands over a list it will not change.
        ``changed``: with the same list as before, only these rows are drawn again (under a
        stream of events most rows on screen did not change).
        """
        selected, before = self.selected_key, self.cursor_row
        same = keys is self._keys
        if same and changed is not None:
            self._refresh_keys(changed)
            return
        self._keys = keys
        if not same:
            self._index = None
        self.virtual_size = Size(self._width, len(keys) + 1)
        row = before
        if selected is not None:
            if before < len(keys) and keys[before] == selected:
                row = before
            else:
                found = self._find(selected)
                row = found if found is not None else min(before, max(len(keys) - 1, 0))
        if row != before:
            # The row moved: scroll with it, so it stays at the same height on screen.
            self.scroll_to(y=self.scroll_y + row - before, animate=False, immediate=True)
        self.cursor_row = row
        self._scroll_to_cursor()
        self.refresh()
        if self.selected_key != selected:
            self.post_message(self.CursorMoved(self, self.selected_key))

    def append_rows(self, keys: Sequence[str], *, drop: int = 0, follow: bool = False) -> None:
        """A tail: add ``keys`` at the end and remove the first ``drop`` rows.

        What it costs follows the change, not the table: no row's cells are built (only the
        rows drawn are), the index is dropped (rebuilt only if a key is looked up), and the
        rows removed go in one slice. ``follow``: the cursor goes to the newest row;
        otherwise it stays on its row, at the same height on screen.
        """
        if not keys and not drop:
            return
        selected = self.selected_key
        drop = min(drop, len(self._keys))
        if drop:
            del self._keys[:drop]
            self._index = None
        elif self._index is not None:
            start = len(self._keys)
            self._index.update((key, start + i) for i, key in enumerate(keys))
        self._keys.extend(keys)
        self.virtual_size = Size(self._width, len(self._keys) + 1)
        if follow:
            self.cursor_row = max(len(self._keys) - 1, 0)
        else:
            if drop:
                self.scroll_to(y=max(self.scroll_y - drop, 0), animate=False, immediate=True)
            self.cursor_row = max(self.cursor_row - drop, 0)
        self._scroll_to_cursor()
        self.refresh()
        if self.selected_key != selected:
            self.post_message(self.CursorMoved(self, self.selected_key))

    def _refresh_keys(self, keys: set[str]) -> None:
        """Draw again the rows on screen whose key is in ``keys``."""
        if not keys:
            return
        top = int(self.scroll_y)
        for index in range(top, min(top + self._page + 1, len(self._keys))):
            if self._keys[index] in keys:
                self.refresh_line(index + 1)  # + the header line

    def select_key(self, key: str) -> bool:
        """Put the cursor on ``key``; False if no such row."""
        index = self.index_of(key)
        if index is None:
            return False
        self.move_cursor(index)
        return True

    def move_cursor(self, row: int) -> None:
        if not self._keys:
            return
        row = max(0, min(row, len(self._keys) - 1))
        if row == self.cursor_row:
            return
        self.cursor_row = row
        self._scroll_to_cursor()
        self.refresh()
        self.post_message(self.CursorMoved(self, self.selected_key))

    def cell_text(self, key: str, column: str) -> str:
        """The plain text of one cell ('' if the row is not shown)."""
        if self.index_of(key) is None:
            return ""
        index = [c for c, _, _ in self.columns].index(column)
        return self.cells_of(key)[index].plain

    # ------------------------------------------------------------------ keys and mouse

    @property
    def _page(self) -> int:
        return max(1, self.scrollable_content_region.height - 1)

    def action_cursor(self, step: int) -> None:
        self.move_cursor(self.cursor_row + step)

    def action_page(self, direction: int) -> None:
        self.move_cursor(self.cursor_row + direction * self._page)

    def action_edge(self, last: int) -> None:
        self.move_cursor(len(self._keys) - 1 if last else 0)

    def on_click(self, event: events.Click) -> None:
        y = event.y
        if y >= 1:
            self.move_cursor(int(self.scroll_y) + y - 1)

    def _scroll_to_cursor(self) -> None:
        height = self._page
        top = int(self.scroll_y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False, immediate=True)
        elif self.cursor_row >= top + height:
            self.scroll_to(y=self.cursor_row - height + 1, animate=False, immediate=True)

    # ------------------------------------------------------------------ drawing

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        scroll_x, scroll_y = self.scroll_offset
        base = self.rich_style
        if y == 0:
            cells: Sequence[Text] = [Text(label) for _, label, _ in self.columns]
            style = self.get_component_rich_style("datatable--header")
            index = -1
        else:
            index = scroll_y + y - 1
            if index >= len(self._keys):
                return Strip.blank(width, base)
            cells = self.cells_of(self._keys[index])
            if index == self.cursor_row:
                component = "datatable--cursor"
            else:
                component = "datatable--odd-row" if index % 2 else "datatable--even-row"
            style = self.get_component_rich_style(component)
            if index == self.cursor_row:
                # The cursor's colours win over the cells' own, as in a DataTable.
                over = Style.from_color(style.color) + Style.from_color(bgcolor=style.bgcolor)
                return self._strip(cells, base + style, width, scroll_x, index, over)
        return self._strip(cells, base + style, width, scroll_x, index)

    def _strip(self, cells: Sequence[Text], style: Style, width: int, scroll_x: int,
               row: int, over: Style | None = None) -> Strip:
        """One row's line; each cell carries its row and column (as DataTable's do: the
        mouse handler reads the row from it)."""
        console = self.app.console
        segments: list[Segment] = []
        pad = Segment(" " * PAD)
        for column, ((_, _, cell_width), cell) in enumerate(
                zip(self.columns, cells, strict=False)):
            text = cell.copy()
            text.no_wrap = True
            text.truncate(cell_width, overflow="ellipsis")
            # The row's style under each cell's own (a state keeps its colour on the cursor
            # row); cell by cell, as DataTable draws them.
            # (Text.render leaves out the Text's own base style: it goes under the spans.)
            inner = Segment.apply_style(text.render(console, end=""),
                                        console.get_style(text.style or ""))
            fill = Segment(" " * (cell_width - text.cell_len + PAD))
            own = [pad, *inner, fill]
            where = style + Style.from_meta({"row": row, "column": column})
            segments.extend(Segment.simplify(Segment.apply_style(own, where, over)))
        styled = segments
        beyond = style + Style.from_meta({"row": row, "column": 0, "out_of_bounds": True})
        return Strip(styled).crop_extend(scroll_x, scroll_x + width, beyond)

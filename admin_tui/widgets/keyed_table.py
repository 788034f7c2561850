"""A DataTable whose rows are replaced by key, keeping the operator's cursor in place."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import DataTable

Cell = Text | str
Row = tuple[str, Sequence[Cell]]


class KeyedTable(DataTable[Cell]):
    """Live data arrives many times a second; redrawing must not move the cursor.

    :meth:`set_rows` updates only the cells that changed when the rows are the same keys in
    the same order (the common case: a state or a relative time changed), and otherwise
    rebuilds the table with the cursor back on the row it was on.
    """

    def __init__(self, columns: Sequence[tuple[str, str, int | None]], **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self._spec = columns

    def on_mount(self) -> None:
        for key, label, width in self._spec:
            self.add_column(label, key=key, width=width)

    @property
    def selected_key(self) -> str | None:
        """The key of the row under the cursor, or None when the table is empty."""
        if self.row_count == 0:
            return None
        row = self.ordered_rows[min(self.cursor_row, self.row_count - 1)]
        return None if row.key.value is None else str(row.key.value)

    def row_keys(self) -> list[str]:
        return [str(row.key.value) for row in self.ordered_rows]

    def set_rows(self, rows: Sequence[Row]) -> None:
        """Show exactly ``rows`` (key, cells), in that order."""
        wanted = [key for key, _ in rows]
        if wanted == self.row_keys():
            self._update_cells(rows)
            return
        selected = self.selected_key
        self.clear()
        for key, cells in rows:
            self.add_row(*cells, key=key)
        if selected in wanted:
            self.move_cursor(row=wanted.index(selected), animate=False)

    def select_key(self, key: str) -> bool:
        """Put the cursor on ``key``; False if no such row."""
        keys = self.row_keys()
        if key not in keys:
            return False
        self.move_cursor(row=keys.index(key), animate=False)
        return True

    def _update_cells(self, rows: Sequence[Row]) -> None:
        columns = [key for key, _, _ in self._spec]
        for key, cells in rows:
            old = self.get_row(key)
            for column, before, after in zip(columns, old, cells, strict=False):
                if before != after:
                    self.update_cell(key, column, after)

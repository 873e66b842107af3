"""Sorting a list page by its query string: `?sort=column` or `?sort=-column`, the page's filters kept.

Each column header is a link to the same page with the sort set (a second click turns it around), so every list
sorts without JavaScript and a sorted, filtered view is a URL one can share. `templates/_sort_headers.html` draws
the headers, with `aria-sort` on the sorted one. A page's filters are a plain Django form (each app's forms.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from django.http import QueryDict

Row = TypeVar("Row")


@dataclass(frozen=True)
class Column:
    """One column of a list: its key in `?sort=`, its header, whether it sorts."""

    key: str
    label: str
    sortable: bool = True


@dataclass(frozen=True)
class Header:
    """A column header as the template draws it."""

    label: str
    sortable: bool
    query: str  # the query string that sorts by this column (the other parameters kept)
    direction: str | None  # "ascending" or "descending" on the sorted column (aria-sort), else None


class SortOrder:
    """The order `params` ask for among `columns` (`default`, e.g. "-created", when they ask for none or a bad one)."""

    def __init__(self, params: QueryDict, columns: Sequence[Column], default: str) -> None:
        self.params = params
        self.columns = columns
        sortable = {column.key for column in columns if column.sortable}
        asked = params.get("sort", "") or default
        key = asked.removeprefix("-")
        if key not in sortable:
            asked, key = default, default.removeprefix("-")
        self.key = key
        self.descending = asked.startswith("-")

    @property
    def value(self) -> str:
        return f"-{self.key}" if self.descending else self.key

    def headers(self) -> list[Header]:
        return [self._header(column) for column in self.columns]

    def _header(self, column: Column) -> Header:
        current = column.key == self.key
        flipped = f"{'' if self.descending else '-'}{column.key}" if current else column.key
        direction = ("descending" if self.descending else "ascending") if current else None
        return Header(column.label, column.sortable, self.query(sort=flipped), direction)

    def query(self, **changes: str) -> str:
        """This page's query string with `changes` (and back to its first page)."""
        params = self.params.copy()
        params.pop("page", None)
        for key, value in changes.items():
            params[key] = value
        return params.urlencode()

    def order_by(self, fields: Mapping[str, Sequence[str]]) -> list[str]:
        """Database ordering for the sorted column (`fields`: column key -> model fields in its ascending order, a
        "-field" descending there); a descending sort turns every one around."""
        ordering = []
        for field in fields[self.key]:
            descending = field.startswith("-") != self.descending
            ordering.append(f"{'-' if descending else ''}{field.removeprefix('-')}")
        return ordering

    def sort(self, rows: Iterable[Row], keys: Mapping[str, Callable[[Row], Any]]) -> list[Row]:
        """`rows` sorted in Python by the sorted column's key (`keys`: column key -> row -> value); rows without a
        value come last either way."""
        key = keys[self.key]
        rows = list(rows)
        present = [row for row in rows if key(row) is not None]
        missing = [row for row in rows if key(row) is None]
        return sorted(present, key=key, reverse=self.descending) + missing

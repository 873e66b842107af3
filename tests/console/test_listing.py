"""Sorting a list by its query string (console/listing.py): headers that toggle, the filters kept, bad sorts ignored."""

from __future__ import annotations

from types import SimpleNamespace

from django.http import QueryDict

from console.listing import Column, SortOrder

COLUMNS = (Column("name", "Name"), Column("size", "Size"), Column("live", "Live", sortable=False))


def order(query: str, default: str = "name") -> SortOrder:
    return SortOrder(QueryDict(query), COLUMNS, default)


def test_it_sorts_by_the_column_asked_for_or_by_default():
    assert (order("sort=-size").key, order("sort=-size").descending) == ("size", True)
    assert (order("").key, order("").descending) == ("name", False)
    assert order("", default="-size").value == "-size"
    for ignored in ("sort=live", "sort=nope", "sort=--name"):
        assert order(ignored).value == "name"


def test_its_headers_turn_the_sorted_column_around_and_keep_the_filters():
    headers = order("q=digits&sort=name&page=3").headers()
    name, size, live = headers
    assert (name.direction, QueryDict(name.query).dict()) == ("ascending", {"q": "digits", "sort": "-name"})
    assert (size.direction, QueryDict(size.query).dict()) == (None, {"q": "digits", "sort": "size"})
    assert not live.sortable
    assert order("sort=-name").headers()[0].direction == "descending"
    assert QueryDict(order("sort=-name").headers()[0].query)["sort"] == "name"


def test_it_turns_every_database_field_around_for_a_descending_sort():
    fields = {"name": ("name", "-created")}
    assert order("sort=name").order_by(fields) == ["name", "-created"]
    assert order("sort=-name").order_by(fields) == ["-name", "created"]


def test_it_sorts_rows_in_python_with_the_missing_values_last():
    rows = [SimpleNamespace(name=n, size=s) for n, s in (("b", 2), ("a", None), ("c", 1))]
    keys = {"name": lambda row: row.name, "size": lambda row: row.size}
    assert [row.name for row in order("sort=size").sort(rows, keys)] == ["c", "b", "a"]
    assert [row.name for row in order("sort=-size").sort(rows, keys)] == ["b", "c", "a"]
    assert [row.name for row in order("sort=-name").sort(iter(rows), keys)] == ["c", "b", "a"]

"""The overview's memory budget bar: what loaded models are charged in each pool, against its budget."""

from __future__ import annotations

from django.template.loader import render_to_string

from console.overview import memory_bars


def test_it_makes_one_bar_a_pool_with_its_share_of_the_budget():
    use = {"pools": {"host": {"budget": 400, "used": 100}, "gpu0": {"budget": None, "used": 7}}, "loads": 3}
    assert memory_bars(use) == [
        {"pool": "host", "budget": 400, "used": 100, "fraction": 0.25},
        {"pool": "gpu0", "budget": None, "used": 7, "fraction": None},
    ]


def test_it_renders_the_bar_with_the_budget_or_without_one():
    bars = memory_bars(
        {"pools": {"host": {"budget": 500 << 20, "used": 125 << 20}, "gpu0": {"budget": None, "used": 0}}}
    )
    html = render_to_string("console/_memory_budget.html", {"overview": {"memory": bars}})
    assert '<meter min="0" max="1" value="0.25"' in html
    assert "125.0\xa0MB of 500.0\xa0MB" in html
    assert "no budget set" in html

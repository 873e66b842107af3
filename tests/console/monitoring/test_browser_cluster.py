"""/monitoring/ of a three-replica cluster in headless Chromium: a line per replica and the total, each replica's
devices, and the replica filter narrowing every chart to one replica's own numbers."""

from __future__ import annotations

import pytest

from tests.conftest import sign_in
from tests.console.monitoring.conftest import replica_server, steady_load
from tests.console.monitoring.test_browser_monitoring import TRACE, WAIT_MS

pytestmark = [pytest.mark.browser, pytest.mark.server]

# the newest value of a chart's named trace (null before it has one)
NEWEST = """([chart, name]) => {
  const trace = (document.getElementById(chart).data || []).find((t) => t.name === name);
  return trace && trace.y.length ? trace.y[trace.y.length - 1] : null;
}"""


def test_it_draws_each_replica_and_narrows_to_the_one_chosen(cluster, page):
    servers = [replica_server(cluster, index) for index in range(3)]
    names = [replica.name for replica in cluster.replicas]
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, servers[0])
    page.goto(servers[0].base_url + "/monitoring/")
    page.wait_for_function("document.getElementById('connection-state').dataset.state === 'live'", timeout=WAIT_MS)
    assert page.locator("#answered-by").get_attribute("data-process") == names[0]
    for name in [*names, "all replicas"]:
        page.wait_for_function(f"({TRACE})(['chart-replicas', {name!r}]).points >= 2", timeout=WAIT_MS)
    for name in names:  # each replica's CPU, not only this one's
        page.wait_for_function(f"({TRACE})(['chart-devices', '{name} CPU utilization %']).points >= 1", timeout=WAIT_MS)
    assert page.locator("#replica-filter").is_visible()
    assert page.locator("#replica-select option").all_text_contents() == ["All replicas", *names]

    with steady_load(servers[1]) as sent:  # load on the second replica only
        page.wait_for_function(f"({NEWEST})(['chart-replicas', {names[1]!r}]) > 0", timeout=WAIT_MS)
        page.select_option("#replica-select", names[2])  # a replica without load, seen through the first one
        page.wait_for_function("document.getElementById('replicas-card').hidden", timeout=WAIT_MS)
        page.wait_for_function(f"({NEWEST})(['chart-throughput', 'simple']) === 0", timeout=WAIT_MS)
        assert page.evaluate(f"({NEWEST})(['chart-throughput', 'simple'])") == 0
        assert "replica=" + names[2] in page.url
        page.select_option("#replica-select", names[1])
        page.wait_for_function(f"({NEWEST})(['chart-throughput', 'simple']) > 0", timeout=WAIT_MS)
        page.select_option("#replica-select", "")  # the whole cluster again
        page.wait_for_function("!document.getElementById('replicas-card').hidden", timeout=WAIT_MS)
        page.wait_for_function(f"({NEWEST})(['chart-throughput', 'simple']) > 0", timeout=WAIT_MS)
        assert sent[0] > 0
    assert "replica=" not in page.url
    assert errors == []

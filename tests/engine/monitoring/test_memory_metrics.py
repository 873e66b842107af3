"""/metrics for the memory budget: loads, evictions, resident bytes per version, the budget's use, cold starts."""

from __future__ import annotations

from engine.monitoring.prometheus import MetricsApp
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings, MemoryBudgetSettings
from tests.engine.monitoring.doubling_model import doubler_request, write_doubler
from tests.engine.monitoring.test_prometheus import families, get, value

ON_DEMAND = '\nparameters { key: "on_demand" value { string_value: "true" } }\n'


async def test_it_counts_loads_cold_starts_and_the_budgets_use(tmp_path):
    repo = write_doubler(tmp_path)
    with (repo / "doubler" / "config.pbtxt").open("a") as config:
        config.write(ON_DEMAND)
    settings = EngineSettings(memory=MemoryBudgetSettings(host_bytes=1 << 30))
    server = InferenceServer(repo, gpu_count=0, settings=settings)
    await server.start()
    app = MetricsApp(server)
    parked = families((await get(app))[2])
    labels = {"model": "doubler", "version": "1"}
    assert value(parked["infera_model_loads"], **labels) == 1  # measured at admission, then parked
    assert value(parked["infera_model_resident_bytes"], **labels, pool="host") == 0
    assert value(parked["infera_memory_budget_bytes"], pool="host") == 1 << 30
    await server.infer(doubler_request(1.0))
    served = families((await get(app))[2])
    assert value(served["infera_model_loads"], **labels) == 2
    assert value(served["infera_model_evictions"], **labels) == 0
    charged = value(served["infera_model_resident_bytes"], **labels, pool="host")
    assert charged == server.memory.used() == value(served["infera_memory_budget_used_bytes"], pool="host")
    cold = served["infera_model_cold_start_seconds"]
    assert [s.value for s in cold.samples if s.name.endswith("_count")] == [1]
    await server.stop()

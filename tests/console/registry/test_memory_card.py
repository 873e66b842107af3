"""The model page's Memory card: each version in this process's memory budget (resident, footprint, loads)."""

from __future__ import annotations

from types import SimpleNamespace

from django.template import Context, Template

from console.runtime_of import RUNTIME_KEY
from engine.serving.server import InferenceServer
from tests.engine.model_factory import make_simple_onnx

CARD = Template("{% load model_memory %}{% model_memory name %}")


def render(server: InferenceServer | None, name: str) -> str:
    request = SimpleNamespace(scope={RUNTIME_KEY: SimpleNamespace(server=server)} if server else {})
    return CARD.render(Context({"request": request, "name": name}))


async def test_it_shows_each_loaded_version_and_nothing_without_an_engine(tmp_path):
    make_simple_onnx(tmp_path, "simple")
    with (tmp_path / "simple" / "config.pbtxt").open("a") as config:
        config.write('\nparameters { key: "on_demand" value { string_value: "true" } }\n')
    server = InferenceServer(tmp_path, gpu_count=0)
    await server.start()
    html = render(server, "simple")
    assert '<tr data-version="1">' in html and "on demand" in html
    assert "<td>no</td>" in html  # parked after its measured load
    assert "<td>1</td>" in html and "ago</td>" in html  # one load; last used by it
    assert render(None, "simple").strip() == ""
    assert render(server, "unknown").strip() == ""
    await server.stop()

"""console.registry.pipeline: an ensemble config's steps, their depths, and the graph its page draws."""

from __future__ import annotations

from console.demo.pipeline import PIPELINE_CONFIG
from console.registry.pipeline import ComposingModel, depths, is_ensemble, layout, steps_of
from engine.config.text_format import config_to_dict, parse_config_pbtxt

DIGITS_PIPELINE = config_to_dict(parse_config_pbtxt(PIPELINE_CONFIG))
REGISTERED = {
    "digits_preprocess": ComposingModel(registered=True, active=1, serving=1),
    "digits": ComposingModel(registered=True, active=2, serving=2),
    "digits_postprocess": ComposingModel(registered=True, active=1, serving=None),
}


def step(model: str, inputs: dict[str, str], outputs: dict[str, str], version: int | str = -1) -> dict:
    return {"model_name": model, "model_version": version, "input_map": inputs, "output_map": outputs}


def ensemble(inputs: list[str], outputs: list[str], *steps: dict) -> dict:
    """An ensemble config as a version stores it (only the fields the graph reads)."""
    return {
        "name": "e",
        "platform": "ensemble",
        "input": [{"name": name} for name in inputs],
        "output": [{"name": name} for name in outputs],
        "ensemble_scheduling": {"step": list(steps)},
    }


# a diamond: A feeds two branches that meet in a join, whose output and one branch's are the ensemble's outputs
DIAMOND = ensemble(
    ["IN"],
    ["OUT", "SIDE"],
    step("join", {"x": "left", "y": "right"}, {"z": "OUT"}),
    step("split", {"i": "IN"}, {"l": "a", "r": "b"}),
    step("left", {"i": "a"}, {"o": "left"}),
    step("right", {"i": "b"}, {"o": "right", "s": "SIDE"}, version=3),
)


def nodes_by_key(graph) -> dict:
    return {node.key: node for node in graph.nodes}


def test_it_reads_the_steps_of_an_ensemble_config_and_nothing_of_others():
    steps = steps_of(DIGITS_PIPELINE)
    assert [(s.model_name, s.model_version) for s in steps] == [
        ("digits_preprocess", -1),
        ("digits", -1),
        ("digits_postprocess", -1),
    ]
    assert steps[1].input_map == {"image": "pixels"}
    assert is_ensemble(DIGITS_PIPELINE)
    assert not is_ensemble({"name": "digits", "platform": "onnxruntime_onnx"})
    assert steps_of({"name": "digits", "ensemble_scheduling": {"step": [step("x", {}, {})]}}) == []
    assert steps_of({}) == []


def test_it_reads_a_model_version_given_as_text():
    config = ensemble(["IN"], ["OUT"], step("m", {"i": "IN"}, {"o": "OUT"}, version="2"))
    assert steps_of(config)[0].model_version == 2


def test_it_puts_a_step_one_past_the_deepest_step_feeding_it():
    assert depths(steps_of(DIAMOND)) == {1: 1, 2: 2, 3: 2, 0: 3}
    assert depths(steps_of(DIGITS_PIPELINE)) == {0: 1, 1: 2, 2: 3}


def test_it_survives_a_cycle_the_engine_would_refuse():
    config = ensemble(["IN"], ["OUT"], step("a", {"i": "IN", "j": "b"}, {"o": "a"}), step("b", {"i": "a"}, {"o": "b"}))
    assert set(depths(steps_of(config))) == {0, 1}
    assert len(layout(config, {}).steps) == 2


def test_it_lays_the_digits_pipeline_out_left_to_right():
    graph = layout(DIGITS_PIPELINE, REGISTERED)
    nodes = nodes_by_key(graph)
    assert [nodes[f"step:{i}"].column for i in range(3)] == [1, 2, 3]
    assert nodes["in:IMAGE"].column == 0
    assert {nodes[f"out:{t}"].column for t in ("LABEL", "TOP3", "TOP3_CLASSES")} == {4}
    xs = [nodes[key].x for key in ("in:IMAGE", "step:0", "step:1", "step:2", "out:LABEL")]
    assert xs == sorted(xs)
    assert graph.width >= max(node.right for node in graph.nodes)
    assert graph.height >= max(node.y + node.height for node in graph.nodes)


def test_it_labels_each_edge_with_its_tensor_from_input_through_steps_to_outputs():
    graph = layout(DIGITS_PIPELINE, REGISTERED)
    assert [(e.tensor, e.source, e.target) for e in graph.edges] == [
        ("IMAGE", "in:IMAGE", "step:0"),
        ("pixels", "step:0", "step:1"),
        ("probabilities", "step:1", "step:2"),
        ("LABEL", "step:2", "out:LABEL"),
        ("TOP3", "step:2", "out:TOP3"),
        ("TOP3_CLASSES", "step:2", "out:TOP3_CLASSES"),
    ]
    pixels = graph.edges[1]
    assert pixels.title == "digits_preprocess.PIXELS → digits.image"
    assert pixels.path.startswith("M") and " C" in pixels.path
    nodes = nodes_by_key(graph)
    assert nodes["step:0"].right < pixels.label_x < nodes["step:1"].x  # the label sits in the gap it crosses


def test_it_says_which_version_each_step_uses():
    config = ensemble(
        ["IN"],
        ["OUT"],
        step("served", {"i": "IN"}, {"o": "a"}),
        step("pinned", {"i": "a"}, {"o": "b"}, version=1),
        step("not_loaded", {"i": "b"}, {"o": "c"}),
        step("unknown", {"i": "c"}, {"o": "OUT"}),
    )
    models = {
        "served": ComposingModel(registered=True, active=3, serving=2),  # mid-switch: the engine still serves 2
        "pinned": ComposingModel(registered=True, active=3, serving=3),
        "not_loaded": ComposingModel(registered=True, active=4, serving=None),
    }
    nodes = nodes_by_key(layout(config, models))
    shown = [(nodes[f"step:{i}"].version_text, nodes[f"step:{i}"].version, nodes[f"step:{i}"].linked) for i in range(4)]
    assert shown == [
        ("v2 (served)", 2, True),
        ("v1 (pinned)", 1, True),
        ("v4 (served)", 4, True),
        ("not registered", None, False),
    ]
    assert [nodes[f"step:{i}"].live_version for i in range(4)] == [None, 1, None, None]


def test_it_draws_a_diamond_with_branches_in_one_column():
    graph = layout(DIAMOND, {})
    nodes = nodes_by_key(graph)
    assert [nodes[f"step:{i}"].column for i in range(4)] == [3, 1, 2, 2]
    left, right = nodes["step:2"], nodes["step:3"]
    assert left.x == right.x and left.y != right.y
    assert nodes["out:SIDE"].column == nodes["out:OUT"].column == 4
    sources = {(e.tensor, e.source, e.target) for e in graph.edges}
    assert ("SIDE", "step:3", "out:SIDE") in sources
    assert ("left", "step:2", "step:0") in sources


def test_it_orders_a_column_by_where_its_inputs_come_from():
    # the first step reads the lower input, so it goes below the second
    config = ensemble(
        ["TOP", "BOTTOM"], ["X", "Y"], step("x", {"i": "BOTTOM"}, {"o": "X"}), step("y", {"i": "TOP"}, {"o": "Y"})
    )
    nodes = nodes_by_key(layout(config, {}))
    assert nodes["in:TOP"].y < nodes["in:BOTTOM"].y
    assert nodes["step:1"].y < nodes["step:0"].y


def test_it_shows_a_tensor_nobody_produces_as_an_input():
    config = ensemble(["IN"], ["OUT"], step("m", {"i": "IN", "j": "MISSING"}, {"o": "OUT"}))
    graph = layout(config, {})
    assert "in:MISSING" in nodes_by_key(graph)
    assert ("MISSING", "in:MISSING", "step:0") in {(e.tensor, e.source, e.target) for e in graph.edges}

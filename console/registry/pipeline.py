"""An ensemble's steps, and their layout as a graph for its page: steps as boxes, tensors as labelled edges.

Read from the config dict a version was checked with (`ensemble_scheduling.step`), so the page draws what is
registered. Columns go left to right by depth: the ensemble's inputs are depth 0, a step is one past the deepest step
producing one of its inputs, the ensemble's outputs sit one column past the deepest step. Within a column, nodes are
ordered by where the nodes feeding them sit, so edges cross less. The result is plain numbers for a server-rendered
SVG; text widths are estimated for the monospace font the drawing uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ENSEMBLE = "ensemble"
SERVED = -1  # a step's model_version: the version its model serves

CHAR_WIDTH = 7.3  # 12px monospace
PADDING = 12.0
STEP_HEIGHT = 62.0
TERMINAL_HEIGHT = 26.0
ROW_GAP = 26.0
MIN_COLUMN_GAP = 96.0
MARGIN = 16.0
HEADING = 22.0  # room above the columns for "inputs" / "outputs"
THROUGHPUT_SAMPLE = "throughput 9999.9/s"  # the widest the live line of a step box gets


@dataclass(frozen=True)
class Step:
    """One step: the model it calls, and its tensors (model name -> ensemble tensor)."""

    index: int
    model_name: str
    model_version: int
    input_map: dict[str, str]
    output_map: dict[str, str]


@dataclass(frozen=True)
class ComposingModel:
    """What the registry and this process's engine know of a model a step calls."""

    registered: bool = False
    active: int | None = None
    serving: int | None = None


@dataclass
class Node:
    """A box (a step) or a pill (an ensemble input or output tensor) at its place in the drawing."""

    key: str
    kind: str  # "input" | "step" | "output"
    label: str
    column: int
    order: float = 0.0
    x: float = 0.0
    y: float = 0.0
    width: float = 0.0
    height: float = 0.0
    step: Step | None = None
    linked: bool = False  # the step's model is registered: the box links to its page
    version: int | None = None  # the version the step uses, when known
    version_text: str = ""
    live_version: int | None = None  # a pinned step's throughput is its version's

    @property
    def right(self) -> float:
        return self.x + self.width

    @property
    def middle(self) -> float:
        return self.y + self.height / 2

    # where the template writes text: a step's three lines from its left, a tensor's name in its middle
    @property
    def text_x(self) -> float:
        return round(self.x + PADDING, 1)

    @property
    def center_x(self) -> float:
        return round(self.x + self.width / 2, 1)

    @property
    def name_y(self) -> float:
        return round(self.y + 20, 1)

    @property
    def version_y(self) -> float:
        return round(self.y + 37, 1)

    @property
    def live_y(self) -> float:
        return round(self.y + 54, 1)

    @property
    def label_y(self) -> float:
        return round(self.middle + 4, 1)


@dataclass
class Edge:
    """One tensor from the node producing it to one node reading it."""

    tensor: str
    source: str
    target: str
    title: str
    path: str = ""
    label_x: float = 0.0
    label_y: float = 0.0


@dataclass
class PipelineGraph:
    """The drawing: its nodes, its edges and its size."""

    nodes: list[Node]
    edges: list[Edge]
    width: float
    height: float
    columns: int
    inputs_x: float = 0.0
    outputs_x: float = 0.0
    heading_y: float = field(default=HEADING - 6)

    @property
    def steps(self) -> list[Node]:
        return [node for node in self.nodes if node.kind == "step"]


def is_ensemble(config: Mapping[str, Any] | None) -> bool:
    """The config (a version's, as stored) is an ensemble's."""
    if not config:
        return False
    return ENSEMBLE in (config.get("platform"), config.get("backend"))


def steps_of(config: Mapping[str, Any] | None) -> list[Step]:
    """The steps of an ensemble config, in order; none for any other config."""
    if not config or not is_ensemble(config):
        return []
    raw = (config.get("ensemble_scheduling") or {}).get("step") or []
    return [
        Step(
            index,
            str(step.get("model_name", "")),
            _version(step.get("model_version", SERVED)),
            {str(k): str(v) for k, v in (step.get("input_map") or {}).items()},
            {str(k): str(v) for k, v in (step.get("output_map") or {}).items()},
        )
        for index, step in enumerate(raw)
        if isinstance(step, Mapping)
    ]


def _version(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return SERVED


def depths(steps: list[Step]) -> dict[int, int]:
    """Each step's depth: 1 + the deepest step producing one of its inputs (tensors nobody produces are depth 0)."""
    producer = {tensor: step for step in steps for tensor in step.output_map.values()}
    found: dict[int, int] = {}
    visiting: set[int] = set()

    def depth(step: Step) -> int:
        if step.index in found:
            return found[step.index]
        if step.index in visiting:  # a cycle (the engine refuses such a config): cut it here
            return 0
        visiting.add(step.index)
        feeding = [producer[t] for t in step.input_map.values() if t in producer and producer[t] is not step]
        found[step.index] = 1 + max((depth(source) for source in feeding), default=0)
        visiting.discard(step.index)
        return found[step.index]

    for step in steps:
        depth(step)
    return found


def layout(config: Mapping[str, Any], models: Mapping[str, ComposingModel]) -> PipelineGraph:
    """The graph of an ensemble config; `models` says what is known of each model its steps call."""
    steps = steps_of(config)
    step_depth = depths(steps)
    last = max(step_depth.values(), default=0) + 1
    producer = {tensor: step for step in steps for tensor in step.output_map.values()}
    inputs = [str(t.get("name", "")) for t in config.get("input") or []]
    outputs = [str(t.get("name", "")) for t in config.get("output") or []]
    read = [tensor for step in steps for tensor in step.input_map.values()]
    inputs += [t for t in dict.fromkeys(read) if t not in producer and t not in inputs]  # read, made by nobody

    nodes: dict[str, Node] = {}
    for order, tensor in enumerate(inputs):
        nodes[f"in:{tensor}"] = Node(f"in:{tensor}", "input", tensor, 0, order)
    for step in steps:
        nodes[f"step:{step.index}"] = _step_node(step, step_depth[step.index], models.get(step.model_name))
    for order, tensor in enumerate(outputs):
        nodes[f"out:{tensor}"] = Node(f"out:{tensor}", "output", tensor, last, order)

    edges: list[Edge] = []
    for step in steps:
        for model_input, tensor in step.input_map.items():
            source = producer.get(tensor)
            origin = f"step:{source.index}" if source is not None and source is not step else f"in:{tensor}"
            where = f"{source.model_name}.{_key_of(source.output_map, tensor)}" if origin.startswith("step") else ""
            title = f"{where or 'ensemble input ' + tensor} → {step.model_name}.{model_input}"
            edges.append(Edge(tensor, origin, f"step:{step.index}", title))
    for tensor in outputs:
        source = producer.get(tensor)
        if source is not None:
            title = f"{source.model_name}.{_key_of(source.output_map, tensor)} → ensemble output {tensor}"
            edges.append(Edge(tensor, f"step:{source.index}", f"out:{tensor}", title))
    edges = [edge for edge in edges if edge.source in nodes]

    gaps = _place(nodes, edges)
    _route(nodes, edges, gaps)
    width = max((node.right for node in nodes.values()), default=0) + MARGIN
    height = max((node.y + node.height for node in nodes.values()), default=HEADING) + MARGIN
    columns = sorted({node.column for node in nodes.values()})
    graph = PipelineGraph(list(nodes.values()), edges, round(width, 1), round(height, 1), len(columns))
    graph.inputs_x = min((n.x for n in nodes.values() if n.kind == "input"), default=MARGIN)
    graph.outputs_x = min((n.x for n in nodes.values() if n.kind == "output"), default=MARGIN)
    return graph


def _key_of(mapping: dict[str, str], tensor: str) -> str:
    return next((key for key, value in mapping.items() if value == tensor), tensor)


def _step_node(step: Step, depth: int, model: ComposingModel | None) -> Node:
    model = model or ComposingModel()
    node = Node(f"step:{step.index}", "step", step.model_name, depth, step.index, step=step, linked=model.registered)
    if not model.registered:
        node.version_text = "not registered"
    elif step.model_version == SERVED:
        node.version = model.serving if model.serving is not None else model.active
        node.version_text = f"v{node.version} (served)" if node.version is not None else "served (none yet)"
    else:
        node.version = node.live_version = step.model_version
        node.version_text = f"v{step.model_version} (pinned)"
    return node


def _text_width(text: str) -> float:
    return len(text) * CHAR_WIDTH + 2 * PADDING


def _place(nodes: dict[str, Node], edges: list[Edge]) -> dict[int, tuple[float, float]]:
    """Sizes, column order (by where the nodes feeding each one sit) and coordinates; returns the gap after each
    column (from its right edge to the next column's left edge)."""
    by_column: dict[int, list[Node]] = {}
    for node in nodes.values():
        if node.kind == "step":
            node.width = max(_text_width(node.label), _text_width(node.version_text), _text_width(THROUGHPUT_SAMPLE))
            node.height = STEP_HEIGHT
        else:
            node.width, node.height = _text_width(node.label), TERMINAL_HEIGHT
        by_column.setdefault(node.column, []).append(node)
    heights = {column: _stack_height(members) for column, members in by_column.items()}
    total = max(heights.values(), default=0)
    sources: dict[str, list[str]] = {}
    for edge in edges:
        sources.setdefault(edge.target, []).append(edge.source)

    gaps: dict[int, tuple[float, float]] = {}
    x = MARGIN
    for column in sorted(by_column):
        members = by_column[column]
        if column > 0:
            for node in members:
                feeding = [nodes[key].middle for key in sources.get(node.key, []) if nodes[key].column < column]
                node.order = sum(feeding) / len(feeding) if feeding else total + node.order
        members.sort(key=lambda node: (node.order, node.step.index if node.step else 0, node.label))
        width = max(node.width for node in members)
        y = HEADING + (total - heights[column]) / 2
        for node in members:
            node.x = round(x + (width - node.width) / 2, 1)
            node.y = round(y, 1)
            y += node.height + ROW_GAP
        labels = [edge.tensor for edge in edges if nodes[edge.source].column == column]
        gap = max(MIN_COLUMN_GAP, max((_text_width(t) for t in labels), default=0) + 2 * PADDING)
        gaps[column] = (x + width, x + width + gap)
        x += width + gap
    return gaps


def _stack_height(members: list[Node]) -> float:
    return sum(node.height for node in members) + ROW_GAP * (len(members) - 1)


def _route(nodes: dict[str, Node], edges: list[Edge], gaps: dict[int, tuple[float, float]]) -> None:
    """Each edge a curve from a port on its source's right side to one on its target's left side, spread so edges
    leave and arrive apart, labelled just past its source."""
    outgoing: dict[str, list[Edge]] = {}
    incoming: dict[str, list[Edge]] = {}
    for edge in edges:
        outgoing.setdefault(edge.source, []).append(edge)
        incoming.setdefault(edge.target, []).append(edge)
    start: dict[int, float] = {}
    end: dict[int, float] = {}
    for key, group in outgoing.items():
        group.sort(key=lambda edge: nodes[edge.target].middle)
        for i, edge in enumerate(group):
            start[id(edge)] = _port(nodes[key], i, len(group))
    for key, group in incoming.items():
        group.sort(key=lambda edge: nodes[edge.source].middle)
        for i, edge in enumerate(group):
            end[id(edge)] = _port(nodes[key], i, len(group))
    for edge in edges:
        source, target = nodes[edge.source], nodes[edge.target]
        x1, y1, x2, y2 = source.right, start[id(edge)], target.x - 4, end[id(edge)]  # 4: room for the arrow head
        bend = max((x2 - x1) / 2, 24.0)
        curve = ((x1, y1), (x1 + bend, y1), (x2 - bend, y2), (x2, y2))
        edge.path = f"M{x1:.1f},{y1:.1f} C{x1 + bend:.1f},{y1:.1f} {x2 - bend:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
        edge.label_x = round(sum(gaps[source.column]) / 2, 1)
        edge.label_y = round(_y_at(curve, edge.label_x) - 4, 1)


def _port(node: Node, index: int, count: int) -> float:
    """Where the `index`-th of `count` edges meets a node's side, spread over its middle."""
    span = node.height * (0.6 if node.kind == "step" else 0.5)
    return round(node.middle - span / 2 + span * (index + 1) / (count + 1), 1)


def _y_at(curve: tuple[tuple[float, float], ...], x: float) -> float:
    """The curve's y where it passes `x` (its x grows monotonically with t, so halving t finds it)."""
    low, high = 0.0, 1.0
    for _ in range(30):
        t = (low + high) / 2
        if _bezier(curve, t)[0] < x:
            low = t
        else:
            high = t
    return _bezier(curve, (low + high) / 2)[1]


def _bezier(curve: tuple[tuple[float, float], ...], t: float) -> tuple[float, float]:
    (x0, y0), (x1, y1), (x2, y2), (x3, y3) = curve
    u = 1 - t
    a, b, c, d = u**3, 3 * u * u * t, 3 * u * t * t, t**3
    return a * x0 + b * x1 + c * x2 + d * x3, a * y0 + b * y1 + c * y2 + d * y3

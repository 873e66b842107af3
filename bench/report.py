"""docs/benchmarks.md from one run's results: machine, method, targets, and every table."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from bench.generation import MARKERS as GENERATION_MARKERS
from bench.report_cells import section_or_reason, short, table
from bench.report_comparisons import ensemble_text, profiles_text, python_text, sequences_text, traffic_text
from bench.report_llm import LLM_HEADING, llm_text
from bench.report_memory import FOOTPRINT_HEADING, MULTIPLEX_HEADING, footprint_text, multiplex_text
from bench.report_throughput import (
    cluster_text,
    dashboards_text,
    engine_text,
    gpu_text,
    grpc_table,
    hotswap_text,
    http_tables,
    method_text,
    ratio_table,
)
from bench.targets import INFERA_LABELS, SECTION_VERDICTS, Verdict, all_verdicts, http_verdicts

BENCH_DIR = Path(__file__).resolve().parent
CLOSING_NOTE = BENCH_DIR / "closing_note.md"
# the profile of the request path (bench/request_profile.py) and what it explains, written by hand
PROFILE_NOTE = BENCH_DIR / "request_profile.md"


PYTHON_HEADING = "Python models: isolated vs in-process"
SEQUENCES_HEADING = "Sequence batcher: direct, oldest and no sequence batching"
ENSEMBLE_HEADING = "Ensembles: digits_pipeline vs the client chaining its steps"
TRAFFIC_HEADING = "Traffic policies: no policy, canary 90/10 and shadow on mlp_small"
CLUSTER_HEADING = "Scale-out: 1, 2 and 3 replicas behind HAProxy"
GPU_HEADING = "GPU path (bench/gpu.sh)"
PROFILES_HEADING = "Profiles: tuned and default settings side by side"
# the headings each `--sections` entry fills; a run of some sections rewrites only theirs (see write_outputs)
SECTION_HEADINGS = {
    "direct": ("Direct ceiling: onnxruntime session.run in process",),
    "http": ("HTTP: throughput and latency", "Ratios"),
    "grpc": ("gRPC: throughput and latency",),
    "profiles": (PROFILES_HEADING,),
    "engine": ("Engine in process (issue 3)",),
    "hotswap": ("Hot swap under load",),
    "dashboards": ("Dashboards open under load",),
    "python": (PYTHON_HEADING,),
    "sequences": (SEQUENCES_HEADING,),
    "ensemble": (ENSEMBLE_HEADING,),
    "traffic": (TRAFFIC_HEADING,),
    "cluster": (CLUSTER_HEADING,),
    "llm": (LLM_HEADING,),
    "footprint": (FOOTPRINT_HEADING,),
    "multiplex": (MULTIPLEX_HEADING,),
    "gpu": (GPU_HEADING,),  # written by `python -m bench --gpu-results FILE`, measured on a GPU machine
}


def section_renderers(results: dict) -> dict[str, Callable[[], str]]:
    """Every `## ` section of docs/benchmarks.md after the title, heading to what renders its body, in order."""
    renderers: dict[str, Callable[[], str]] = {
        "Machine": lambda: table(["", ""], [[k, short(v)] for k, v in results["system"].items()]),
        "Method": lambda: method_text(results["settings"]),
        "Targets": lambda: table(TARGET_HEADERS, [target_cells(v) for v in all_verdicts(results)]),
        "Direct ceiling: onnxruntime session.run in process": lambda: table(
            ["model", "batch", "inferences/s", "µs per call"],
            [
                [r["model"], str(r["batch"]), f"{r['infer_per_s']:.0f}", f"{r['call_us']:.1f}"]
                for r in results.get("direct", [])
            ],
        ),
        "HTTP: throughput and latency": lambda: http_tables(results),
        "Ratios": lambda: ratio_table(results),
        "gRPC: throughput and latency": lambda: grpc_table(results),
        PROFILES_HEADING: lambda: section_or_reason(results.get("profiles"), profiles_text),
        "Engine in process (issue 3)": lambda: section_or_reason(results.get("engine"), engine_text),
        "Hot swap under load": lambda: section_or_reason(results.get("hotswap"), hotswap_text),
        "Dashboards open under load": lambda: section_or_reason(results.get("dashboards"), dashboards_text),
        PYTHON_HEADING: lambda: section_or_reason(results.get("python"), python_text),
        SEQUENCES_HEADING: lambda: section_or_reason(results.get("sequences"), sequences_text),
        ENSEMBLE_HEADING: lambda: section_or_reason(results.get("ensemble"), ensemble_text),
        TRAFFIC_HEADING: lambda: section_or_reason(results.get("traffic"), traffic_text),
        CLUSTER_HEADING: lambda: section_or_reason(results.get("cluster"), cluster_text),
        LLM_HEADING: lambda: section_or_reason(results.get("llm"), llm_text),
        FOOTPRINT_HEADING: lambda: section_or_reason(results.get("footprint"), footprint_text),
        MULTIPLEX_HEADING: lambda: section_or_reason(results.get("multiplex"), multiplex_text),
        GPU_HEADING: lambda: gpu_text(results.get("gpu")),
    }
    if PROFILE_NOTE.exists():
        renderers["Where the time goes"] = lambda: PROFILE_NOTE.read_text().strip()
    if CLOSING_NOTE.exists():
        renderers["Closing note"] = lambda: CLOSING_NOTE.read_text().strip()
    return renderers


def render_markdown(results: dict) -> str:
    """The whole docs/benchmarks.md."""
    parts = [
        "# Benchmarks",
        f"Generated by `{results['command']}` on {results['date']}. Do not edit by hand: run it again.",
    ]
    parts += [f"## {heading}\n\n{render()}" for heading, render in section_renderers(results).items()]
    return "\n\n".join(parts) + "\n"


TARGET_HEADERS = ["target", "goal", "measured", "result"]


def target_cells(verdict: Verdict) -> list[str]:
    """A verdict as a row of the Targets table."""
    return [verdict.target, verdict.goal, short(verdict.measured, 200), verdict.status]


def with_target_rows(targets: str, verdicts: list[Verdict]) -> str:
    """The Targets section's text with each verdict's row replaced, or added after the table's last row; a text
    without the table stays as it is (the next whole run writes it)."""
    lines = targets.split("\n")
    rows = [i for i, line in enumerate(lines) if line.startswith("| ")]
    if not rows or lines[rows[0]] != "| " + " | ".join(TARGET_HEADERS) + " |":
        return targets
    where = {lines[i][2:].split(" | ")[0]: i for i in rows[2:]}
    added = []
    for verdict in verdicts:
        row = "| " + " | ".join(target_cells(verdict)) + " |"
        if verdict.target in where:
            lines[where[verdict.target]] = row
        else:
            added.append(row)
    lines[rows[-1] + 1 : rows[-1] + 1] = added
    return "\n".join(lines)


def sections_of(markdown: str) -> tuple[str, dict[str, str]]:
    """The text before the first `## ` heading, and each `## ` section (its heading included) by its heading."""
    preamble, *blocks = re.split(r"^(?=## )", markdown, flags=re.MULTILINE)
    return preamble, {block.splitlines()[0][3:].strip(): block.rstrip("\n") for block in blocks}


def splice_sections(markdown: str, texts: dict[str, str], order: list[str]) -> str:
    """`markdown` with the `## ` sections named in `texts` replaced; one it lacks goes where `order` puts it."""
    preamble, sections = sections_of(markdown)
    for heading, text in texts.items():
        block = f"## {heading}\n\n{text}"
        if heading in sections:
            sections[heading] = block
            continue
        later = order[order.index(heading) + 1 :] if heading in order else []
        following = next((h for h in later if h in sections), None)
        headings = list(sections)
        at = headings.index(following) if following else len(headings)
        sections = dict([*list(sections.items())[:at], (heading, block), *list(sections.items())[at:]])
    return preamble + "\n\n".join(sections.values()) + "\n"


def print_summary(results: dict) -> None:
    """The targets table on stdout."""
    print("\nTargets")
    for v in all_verdicts(results):
        print(f"  {v.status:4}  {v.target:52} {v.goal:34} {v.measured}")


# where the sections other tools write begin (bench.generation's, and the hand-written ones after it): a whole run
# renders the sections before it and keeps the rest of the report as it was
KEPT_FROM = GENERATION_MARKERS[0]


def kept_tail(markdown_path: Path) -> str:
    """The existing report's text from KEPT_FROM on, after a blank line; empty when it has none."""
    text = markdown_path.read_text() if markdown_path.exists() else ""
    at = text.find(KEPT_FROM)
    return "" if at < 0 else "\n" + text[at:].rstrip("\n") + "\n"


def write_outputs(
    results: dict, markdown_path: Path | None, results_folder: Path, only: list[str] | None = None
) -> None:
    """latest.json always; with the markdown, published.json too (what --render-only renders again).

    A run of `only` some sections keeps the rest of an existing report: it rewrites just those sections'
    headings of the markdown and the Targets rows they decide alone (`SECTION_VERDICTS`; the title and the other
    rows stay the last whole run's) and merges its figures into an existing published.json.
    """
    results_folder.mkdir(parents=True, exist_ok=True)
    (results_folder / "latest.json").write_text(json.dumps(results, indent=1, default=str))
    if markdown_path is None:
        return
    published = results_folder / "published.json"
    if only is None or not markdown_path.exists():
        published.write_text(json.dumps(results, indent=1, default=str))
        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        markdown_path.write_text(render_markdown(results) + kept_tail(markdown_path))
        return
    if published.exists():
        merged = json.loads(published.read_text()) | {key: results[key] for key in only if key in results}
        published.write_text(json.dumps(merged, indent=1, default=str))
    renderers = section_renderers(results)
    chosen = {heading: renderers[heading]() for key in only for heading in SECTION_HEADINGS[key]}
    markdown = markdown_path.read_text()
    verdicts = [v for key in only if key in SECTION_VERDICTS for v in SECTION_VERDICTS[key](results)]
    if "http" in only:  # the HTTP targets this run measured (a server or model it left out keeps its row)
        verdicts += [v for label in INFERA_LABELS for v in http_verdicts(results, label) if v.status != "N/A"]
    targets = sections_of(markdown)[1].get("Targets")
    if verdicts and targets is not None:
        chosen["Targets"] = with_target_rows(targets.partition("\n")[2].strip("\n"), verdicts)
    markdown_path.write_text(splice_sections(markdown, chosen, list(renderers)))

"""`manage.py analyze MODEL --budget-ms N`: here on an engine of its own, or waiting for a serving process."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from console.analyzer.models import Analysis, AnalysisState
from console.audit.models import AuditEvent
from console.registry.models import ModelVersion, RegisteredModel, VersionState
from console.registry.services import model_actions, new_versions
from console.registry.uploads import parse_config_text
from tests.console.registry.conftest import SIMPLE_PBTXT, model_file

pytestmark = pytest.mark.django_db(transaction=True)

SMALL = ["--concurrency", "2", "--max-batch-size", "8", "--queue-delay-us", "0,200", "--seconds", "0.05"]


@pytest.fixture(autouse=True)
def simple(operator, simple_onnx):
    """simple with one version in the store, READY as a serving process would have it."""
    model = model_actions.register_model(operator, "simple")
    new_versions.add_version(operator, model, model_file(simple_onnx), config=parse_config_text(SIMPLE_PBTXT))
    ModelVersion.objects.filter(number=1).update(state=VersionState.READY)


def analyze(*arguments: str) -> str:
    out = StringIO()
    call_command("analyze", "simple", *arguments, stdout=out)
    return out.getvalue()


def test_it_analyses_here_prints_each_point_and_applies_the_recommendation():
    text = analyze("--budget-ms", "60000", "--here", "--apply", *SMALL)
    assert "of 'simple' version 1: 2 configs x concurrency [1, 2], 0.05 s each" in text
    # simple's config names no instance count: an ONNX model on the CPU serves with Triton's default of 2
    for label in ("batch 8 · delay 0 µs · 2 instances", "batch 8 · delay 200 µs · 2 instances"):
        assert f"{label}, concurrency 1: " in text and f"{label}, concurrency 2: " in text
    assert "Recommended (p99 within 60000 ms): batch 8 · delay " in text
    assert "Applied as version 2 of 'simple' (active once READY)" in text
    analysis = Analysis.objects.get()
    assert analysis.state == AnalysisState.DONE and analysis.applied_version == 2
    assert RegisteredModel.objects.get(name="simple").active_number == 2
    assert AuditEvent.objects.get(action="analysis.start").actor_name == "manage.py analyze"


def test_it_says_when_no_config_fits_the_budget():
    text = analyze("--budget-ms", "0.000001", "--here", *SMALL)
    assert "No recommendation: no config kept p99 within 1e-06 ms" in text


def test_it_gives_up_when_no_serving_process_takes_it():
    with pytest.raises(CommandError, match="no serving process took analysis .* within 0 s"):
        analyze("--budget-ms", "10", "--pickup-seconds", "0", *SMALL)
    assert Analysis.objects.get().state == AnalysisState.CANCELLED


def test_it_refuses_an_analysis_past_its_bounds_with_the_reason():
    with pytest.raises(CommandError, match="max_concurrency must be 1 to 64, got 100"):
        analyze("--budget-ms", "10", "--concurrency", "100")
    with pytest.raises(CommandError, match="expected whole numbers separated by commas"):
        analyze("--budget-ms", "10", "--instances", "one")

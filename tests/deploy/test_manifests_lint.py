"""yamllint over every YAML file in the repository and over the Helm chart's rendered output (its templates are
not YAML until Helm has rendered them), with the repository's .yamllint."""

from __future__ import annotations

import subprocess

import pytest
from yamllint import linter
from yamllint.config import YamlLintConfig

from tests.deploy.manifests import HELM_EVERYTHING, REPO_ROOT, helm_render

CONFIG = YamlLintConfig(file=str(REPO_ROOT / ".yamllint"))
HELM_VALUES = {
    "helm-default": ((), None),
    "helm-gpu": (("values-gpu.yaml",), None),
    "helm-everything": ((), HELM_EVERYTHING),
    "helm-subcharts": ((), {"postgresql": {"enabled": True}, "redis": {"enabled": True}}),
}


def problems(text: str, path: str) -> list[str]:
    return [f"{path}:{p.line}:{p.column} {p.message}" for p in linter.run(text, CONFIG, path)]


def yaml_files() -> list[str]:
    """Tracked and new files named *.yaml or *.yml, less what .gitignore leaves out."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.yaml", "*.yml"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(path for path in listed.stdout.splitlines() if (REPO_ROOT / path).is_file())


def test_it_lints_every_yaml_file():
    files = [path for path in yaml_files() if not CONFIG.is_file_ignored(path)]
    assert "deploy/k8s/base/deployment.yaml" in files and "deploy/helm/infera/values.yaml" in files
    found = [problem for path in files for problem in problems((REPO_ROOT / path).read_text(), path)]
    assert found == []


@pytest.mark.parametrize("render", sorted(HELM_VALUES))
def test_it_renders_the_chart_as_clean_yaml(render):
    files, values = HELM_VALUES[render]
    templates = {path: text for path, text in helm_render(*files, values=values).items() if path.endswith(".yaml")}
    assert any("deployment.yaml" in path for path in templates)
    found = [problem for path, text in templates.items() if text.strip() for problem in problems(text, path)]
    assert found == []


def test_it_finds_what_yamllint_should_find():
    text = "a: 1\na: 2\nb:   [1,2]\n"
    found = problems(text, "example.yaml")
    assert any("duplication of key" in problem for problem in found), found

"""Fixtures of the LLM tests: one tiny random Llama folder per session, one loaded runner per module."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.llm.tiny_llama import build_tiny_llama


@pytest.fixture(scope="session")
def tiny_llama_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))

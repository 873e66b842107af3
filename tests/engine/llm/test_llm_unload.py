"""Unloading an llm model lets its weights, KV cache and tokenizer go, even while its backend object is still held."""

from __future__ import annotations

import shutil
import weakref
from pathlib import Path

import pytest

from engine.serving.server import InferenceServer
from engine.settings import EngineSettings
from tests.engine.llm.test_llm_backend import CONFIG, collect, text_request

pytestmark = pytest.mark.asyncio


async def test_it_drops_the_model_cache_and_tokenizer_on_unload(tiny_llama_folder: Path, tmp_path: Path):
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.pbtxt").write_text(CONFIG)
    shutil.copytree(tiny_llama_folder, tmp_path / "tiny" / "1")
    server = InferenceServer(tmp_path, gpu_count=0, settings=EngineSettings())
    await server.start(load_models=True)
    try:
        await collect(await server.infer_stream(text_request("a paged cache", max_tokens=4, temperature=0.0)))
        backend = server.get_model("tiny").instances[0].backend
        runner = backend.runner
        held = [weakref.ref(x) for x in (runner.model, runner.cache, runner.cache.key[0], runner.tokenizer)]
        engine = weakref.ref(backend.engine)
        del runner
        await server.unload_model("tiny")
        assert backend.runner is None and backend.engine is None  # the backend object itself is still held here
        assert engine() is None
        assert [ref() for ref in held] == [None] * len(held)
    finally:
        await server.stop()

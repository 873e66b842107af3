"""The demo pipeline (an ensemble of python and ONNX steps) through a real server with tritonclient."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from console.demo.pipeline import digit_image, png_bytes, write_pipeline
from console.demo.repository import DIGITS_CONFIG, digits_split, train_digits_onnx
from tests.engine.frontend.server_process import Served, running_with_grpc

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    repo = tmp_path_factory.mktemp("pipeline-repository")
    (repo / "digits" / "2").mkdir(parents=True)
    (repo / "digits" / "config.pbtxt").write_text(DIGITS_CONFIG)
    (repo / "digits" / "2" / "model.onnx").write_bytes(train_digits_onnx(2)[0])
    write_pipeline(repo)
    with running_with_grpc(repo, tmp_path_factory.mktemp("pipeline-logs") / "uvicorn.log") as served:
        yield served


@pytest.fixture(scope="module")
def samples() -> tuple[np.ndarray, np.ndarray]:
    _, _, test_x, test_y = digits_split()
    return test_x[:6], test_y[:6]


def images(pixels: np.ndarray) -> np.ndarray:
    return np.array([[png_bytes(digit_image(row))] for row in pixels], dtype=object)


def tensor(module, name: str, array: np.ndarray, datatype: str):
    entry = module.InferInput(name, list(array.shape), datatype)
    entry.set_data_from_numpy(array)
    return entry


def test_the_pipeline_gives_the_label_of_its_steps_called_by_hand(served, samples):
    pixels, truth = samples
    client = httpclient.InferenceServerClient(served.http_url)
    result = client.infer("digits_pipeline", [tensor(httpclient, "IMAGE", images(pixels), "BYTES")])
    labels = [int(label) for label in result.as_numpy("LABEL").reshape(-1)]
    by_hand = client.infer("digits_preprocess", [tensor(httpclient, "IMAGE", images(pixels), "BYTES")])
    grid = by_hand.as_numpy("PIXELS")
    np.testing.assert_allclose(grid, pixels, atol=0.1)  # the PNG round trip keeps the pixels
    probabilities = client.infer("digits", [tensor(httpclient, "image", grid, "FP32")]).as_numpy("probabilities")
    assert labels == list(probabilities.argmax(axis=1))
    assert sum(a == b for a, b in zip(labels, truth, strict=True)) >= 5
    top3 = result.as_numpy("TOP3")
    assert top3.shape == (6, 3) and (np.diff(top3, axis=1) <= 0).all()
    assert list(result.as_numpy("TOP3_CLASSES")[:, 0]) == labels


def test_only_the_requested_outputs_come_back(served, samples):
    client = httpclient.InferenceServerClient(served.http_url)
    wanted = [httpclient.InferRequestedOutput("LABEL", binary_data=True)]
    result = client.infer(
        "digits_pipeline", [tensor(httpclient, "IMAGE", images(samples[0][:1]), "BYTES")], outputs=wanted
    )
    assert [o["name"] for o in result.get_response()["outputs"]] == ["LABEL"]


def test_a_bad_image_is_the_clients_error_and_names_the_step(served):
    client = httpclient.InferenceServerClient(served.http_url)
    bad = np.array([[b"not a png"]], dtype=object)
    with pytest.raises(InferenceServerException, match="step 0 \\('digits_preprocess'\\).*not a PNG") as failure:
        client.infer("digits_pipeline", [tensor(httpclient, "IMAGE", bad, "BYTES")])
    assert failure.value.status() == "400"


def test_the_pipeline_answers_over_grpc(served, samples):
    pixels, _ = samples
    with grpcclient.InferenceServerClient(served.grpc_url) as client:
        result = client.infer("digits_pipeline", [tensor(grpcclient, "IMAGE", images(pixels[:2]), "BYTES")])
        metadata = client.get_model_metadata("digits_pipeline", as_json=True)
    assert result.as_numpy("LABEL").shape == (2, 1) and metadata["platform"] == "ensemble"


def test_the_ensembles_statistics_count_its_calls_and_its_steps_count_theirs(served, samples):
    client = httpclient.InferenceServerClient(served.http_url)

    def successes(model: str) -> int:
        return int(client.get_inference_statistics(model)["model_stats"][0]["inference_stats"]["success"]["count"])

    before = {m: successes(m) for m in ("digits_pipeline", "digits_preprocess", "digits", "digits_postprocess")}
    for _ in range(3):
        client.infer("digits_pipeline", [tensor(httpclient, "IMAGE", images(samples[0][:2]), "BYTES")])
    assert {m: successes(m) - before[m] for m in before} == {m: 3 for m in before}

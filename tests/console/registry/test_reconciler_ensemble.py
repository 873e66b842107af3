"""An ensemble uploaded as a config alone serves once reconciled, over the version its model serves."""

from __future__ import annotations

import numpy as np
import pytest
from asgiref.sync import sync_to_async

from console.registry.services import model_actions, new_versions
from console.registry.uploads import parse_config_text
from engine.types import InferenceRequest
from tests.console.registry.conftest import ensemble_pbtxt
from tests.console.registry.engine_helpers import reconcile_once, register, states

pytestmark = pytest.mark.django_db(transaction=True)


@sync_to_async
def register_ensemble(actor, name: str) -> None:
    model = model_actions.register_model(actor, name)
    new_versions.add_version(actor, model, None, config=parse_config_text(ensemble_pbtxt(name)))


async def test_it_serves_an_ensemble_uploaded_without_a_model_file(engine, operator, simple_onnx):
    await register(operator, "simple", [simple_onnx])
    await register_ensemble(operator, "pair")
    await reconcile_once(engine)
    assert await states("pair") == {1: ("READY", "")}
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    answer = await engine.infer(InferenceRequest(model_name="pair", inputs={"A": a, "B": a}, batch_size=1))
    np.testing.assert_array_equal(answer.outputs["SUM"], a + a)

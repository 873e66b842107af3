"""MLServer's side of the comparison: an onnxruntime runtime for MLServer 1.7.1, one intra-op thread.

This module runs inside bench/.peers/mlserver-venv (MLServer's own virtualenv), never in Infera's.
"""

from __future__ import annotations

import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse
from mlserver.utils import get_model_uri


class OnnxRuntimeModel(MLModel):
    """Serves one ONNX file: v2 inputs decoded as numpy, outputs encoded back, the same threads as Infera."""

    async def load(self) -> bool:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        path = await get_model_uri(self._settings)
        self._session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self._output_names = [o.name for o in self._session.get_outputs()]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feeds = {request_input.name: NumpyCodec.decode_input(request_input) for request_input in payload.inputs}
        results = self._session.run(self._output_names, feeds)
        return InferenceResponse(
            model_name=self.name,
            model_version=self.version,
            outputs=[
                NumpyCodec.encode_output(name, array) for name, array in zip(self._output_names, results, strict=True)
            ],
        )

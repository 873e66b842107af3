"""Triton's python-backend add_sub, the bench's model.py: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1.

Copied into the python section's repository as model.py (bench.models.write_python_repository); the server
provides triton_python_backend_utils, so this module is not imported by the bench itself.
"""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """One response per request of the batch, each row summed and subtracted element by element."""

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            outputs = [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses

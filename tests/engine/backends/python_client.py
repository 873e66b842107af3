"""tritonclient inputs for the python-backend API tests."""

from __future__ import annotations

import numpy as np
import tritonclient.http as httpclient

A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 3, dtype=np.int32)


def tensor(name: str, array: np.ndarray, datatype: str) -> httpclient.InferInput:
    entry = httpclient.InferInput(name, list(array.shape), datatype)
    entry.set_data_from_numpy(array)
    return entry


def int32_pair(a: np.ndarray = A, b: np.ndarray = B) -> list[httpclient.InferInput]:
    return [tensor("INPUT0", a, "INT32"), tensor("INPUT1", b, "INT32")]

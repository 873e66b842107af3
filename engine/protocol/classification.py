"""Triton's classification extension: an output answered as its top-k "value:index" strings."""

from __future__ import annotations

import numpy as np


def classify(array: np.ndarray, count: int, batched: bool) -> np.ndarray:
    """Top `count` entries of each batch item (of the whole tensor when unbatched), as BYTES strings.

    The result is [batch, k] for a batching model and [k] otherwise, highest value first.
    """
    rows = array.reshape(array.shape[0] if batched and array.ndim else 1, -1)
    k = min(count, rows.shape[1])
    order = np.argsort(-rows.astype(np.float64), axis=1, kind="stable")[:, :k]
    values = np.take_along_axis(rows, order, axis=1)
    labels = [
        f"{float(v):f}:{int(i)}".encode() for v, i in zip(values.ravel().tolist(), order.ravel().tolist(), strict=True)
    ]
    result = np.empty(len(labels), dtype=object)
    result[:] = labels
    return result.reshape(rows.shape[0], k) if batched else result.reshape(k)

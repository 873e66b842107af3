"""tritonclient inputs for the python-backend API tests."""

from __future__ import annotations

import http.client

import numpy as np
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 3, dtype=np.int32)


def tensor(name: str, array: np.ndarray, datatype: str) -> httpclient.InferInput:
    entry = httpclient.InferInput(name, list(array.shape), datatype)
    entry.set_data_from_numpy(array)
    return entry


def int32_pair(a: np.ndarray = A, b: np.ndarray = B) -> list[httpclient.InferInput]:
    return [tensor("INPUT0", a, "INT32"), tensor("INPUT1", b, "INT32")]


def scrape(url: str) -> dict[str, dict]:
    host, port = url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("GET", "/metrics")
    text = connection.getresponse().read().decode()
    connection.close()
    return {family.name: family for family in text_string_to_metric_families(text)}

"""A large request body is decoded on a worker thread, so it cannot stall the event loop for other requests."""

from __future__ import annotations

import threading

import orjson

from engine.frontend import V2App, handlers
from tests.engine.frontend.asgi_client import call
from tests.engine.frontend.test_v2_app import simple_request


async def test_a_large_body_is_decoded_off_the_event_loop(v2_server, monkeypatch):
    v2_app = V2App(v2_server, max_body_bytes=4 * 1024 * 1024)
    threads: list[str] = []
    decode = handlers.decode_infer_request

    def recording(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return decode(*args, **kwargs)

    monkeypatch.setattr(handlers, "decode_infer_request", recording)
    small = simple_request()
    padded = orjson.dumps({**orjson.loads(small), "id": "x" * (handlers.DECODE_ON_LOOP_BYTES + 1)})
    assert (await call(v2_app, "POST", "/v2/models/simple/infer", small)).status == 200
    assert (await call(v2_app, "POST", "/v2/models/simple/infer", padded)).status == 200
    assert threads[0] == threading.main_thread().name and threads[1] != threading.main_thread().name

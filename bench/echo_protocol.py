"""The HTTP ceiling past ASGI: uvicorn's httptools protocol answering a v2 inference with a canned response itself.

bench/echo_app.py measures what an ASGI app can reach under uvicorn; this measures what uvicorn's protocol reaches
when it answers without its ASGI request cycle, as Infera's /v2 inference is answered (engine/frontend/direct_http.py):
the body read whole, the answer written in one piece. Anything but a POST to a `.../infer` path goes to the ASGI
echo. `python -m bench.echo_protocol PORT` with BENCH_ECHO_DIR set, as bench/echo_app.py.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from bench.echo_app import Responses, load_responses, make_app


def echo_protocol(responses: Responses) -> type[HttpToolsProtocol]:
    """uvicorn's protocol, answering POST .../<model>/infer from `responses` (JSON) on its own."""
    canned = {}
    for (model, encoding), (body, headers) in responses.items():
        if encoding == "json":
            head = b"HTTP/1.1 200 OK\r\n" + b"".join(k + b": " + v + b"\r\n" for k, v in headers) + b"\r\n"
            canned[model.encode()] = head + body

    class EchoProtocol(HttpToolsProtocol):
        answer: bytes | None = None

        def on_headers_complete(self) -> None:
            parts = self.url.split(b"/")
            if self.parser.get_method() == b"POST" and parts[-1] == b"infer" and len(parts) >= 5:
                self.answer = canned.get(parts[3])
                if self.answer is not None:
                    return
            self.answer = None
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            if self.answer is None:
                super().on_body(body)  # the body itself is read and dropped, as the ASGI echo drops it

        def on_message_complete(self) -> None:
            if self.answer is None:
                super().on_message_complete()
                return
            self.transport.write(self.answer)
            self.answer = None

    return EchoProtocol


def main() -> None:
    responses = load_responses(Path(os.environ["BENCH_ECHO_DIR"]))
    uvicorn.run(
        make_app(responses),
        host="127.0.0.1",
        port=int(sys.argv[1]),
        http=echo_protocol(responses),
        loop="uvloop",
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()

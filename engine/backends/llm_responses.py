"""The `llm` backend's answers: a request's engine updates sent on its response stream as tensors.

`text_output` (a response per token, or one with the whole text), on the last response `finish_reason` and the
token counts, and `logprobs` (a JSON list of each token's entry) when the request asks for them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from engine.errors import BackendError, InferaError
from engine.serving.streams import StreamClosed

TEXT_OUTPUT = "text_output"
LOGPROBS_OUTPUT = "logprobs"
COUNT_OUTPUTS = ("prompt_tokens", "completion_tokens", "cached_tokens")


def logprob_entry(tokenizer: Any, token: Any) -> dict[str, Any]:
    """One token's entry of the `logprobs` output: its id, text and logprob, and its alternatives alike."""
    top = [
        {"token_id": token_id, "token": tokenizer.decode([token_id]), "logprob": logprob}
        for token_id, logprob in token.top_logprobs
    ]
    text = tokenizer.decode([token.token_id])
    return {"token_id": token.token_id, "token": text, "logprob": token.logprob, "top_logprobs": top}


class ResponseSink:
    """A request's updates to its response stream: a response per token, or one with the whole text; each with
    its tokens' logprobs when `describe` (a token's entry) is given."""

    def __init__(self, stream: Any, per_token: bool, describe: Callable[[Any], dict[str, Any]] | None = None) -> None:
        self.stream = stream
        self.per_token = per_token
        self.describe = describe
        self.text: list[str] = []
        self.logprobs: list[dict[str, Any]] = []

    def __call__(self, update: Any) -> None:
        try:
            self._send(update)
        except StreamClosed:
            pass  # the stream ended already (its version stopped)

    def _send(self, update: Any) -> None:
        stream = self.stream
        if update.error is not None:
            error = update.error if isinstance(update.error, InferaError) else BackendError(str(update.error))
            stream.fail(error)
            return
        if update.finish_reason == "abort":
            stream.send(final=True)
            return
        if self.describe is not None:
            self.logprobs += [self.describe(token) for token in update.logprobs]
        if not update.finished:
            if self.per_token:
                stream.send(self._outputs(update.text))
            else:
                self.text.append(update.text)
            return
        outputs = self._outputs(update.text if self.per_token else "".join(self.text) + update.text)
        outputs["finish_reason"] = np.array([update.finish_reason.encode()], dtype=np.object_)
        for name in COUNT_OUTPUTS:
            outputs[name] = np.array([getattr(update, name)], dtype=np.int32)
        stream.send(outputs, final=True)

    def _outputs(self, text: str) -> dict[str, np.ndarray]:
        """The text, and the logprobs gathered since the last response when they are asked for."""
        outputs = {TEXT_OUTPUT: np.array([text.encode("utf-8")], dtype=np.object_)}
        if self.describe is not None:
            outputs[LOGPROBS_OUTPUT] = np.array([json.dumps(self.logprobs).encode()], dtype=np.object_)
            self.logprobs = []
        return outputs

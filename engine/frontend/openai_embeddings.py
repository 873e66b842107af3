"""POST /v1/embeddings in OpenAI's shape, over any model that makes one vector per input.

A model embeds when its config names its tensors: `openai_embedding_input` (BYTES [1], a text) and
`openai_embedding_output` (FP32, the vector); `openai_token_ids_input` (INT64 [-1]) when it also takes token ids, and
`openai_token_count_output` (INT32 [1]) when it says how many tokens it read (usage.prompt_tokens; else a text's
characters are counted). The encoder backend's models name all four (engine/backends/encoder.py).

`input` is a string, a list of strings, a list of token ids or a list of such lists: at most MAX_INPUTS inputs
(OpenAI's limit), each non-empty and at most MAX_INPUT_CHARS characters or MAX_INPUT_TOKENS ids; the model cuts what
is longer than it reads (the encoder's max_seq_length). Each input is one request to the model, all sent at once, so
the model's dynamic batcher runs them together (with other callers'). `encoding_format` is "float" (lists of numbers)
or "base64" (the little-endian float32 bytes, as OpenAI's clients decode them); `dimensions` must be the model's own
(no model here shortens its vectors): another number is a 400 naming it. `user` is taken and unused.

The caller's token budgets hold as on completions (openai_budgets.py): once the request is checked, its inputs'
length (characters, or token ids) is reserved against tokens per minute (and a slot of its concurrent requests) before
any input is queued, a 429 with Retry-After in OpenAI's shape when a budget is spent; when it ends, the tokens the
model read (usage.prompt_tokens; none when it failed) replace the reservation and are counted as prompt tokens.
"""

from __future__ import annotations

import asyncio
import base64
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from engine.errors import InferaError
from engine.frontend import openai_budgets
from engine.frontend import openai_fields as fields
from engine.frontend.openai_fields import OpenAIError
from engine.llm.budgets import BudgetGate
from engine.llm.usage import Usage
from engine.protocol import parse_json_object
from engine.serving.admission import ANONYMOUS, Principal
from engine.types import InferenceRequest

if TYPE_CHECKING:
    from engine.config.model_config import ModelConfig
    from engine.serving.server import InferenceServer

EMBEDDING_INPUT = "openai_embedding_input"
EMBEDDING_OUTPUT = "openai_embedding_output"
TOKEN_IDS_INPUT = "openai_token_ids_input"  # nosec B105
TOKEN_COUNT_OUTPUT = "openai_token_count_output"  # nosec B105
MAX_INPUTS = 2048
MAX_INPUT_CHARS = 32768
MAX_INPUT_TOKENS = 8192
ENCODING_FORMATS = ("float", "base64")


def is_embedding_model(config: ModelConfig) -> bool:
    return bool(config.parameters.get(EMBEDDING_INPUT) and config.parameters.get(EMBEDDING_OUTPUT))


def dimension(config: ModelConfig) -> int | None:
    """The length of the model's vectors when its config fixes it."""
    output = config.output_named(config.parameters.get(EMBEDDING_OUTPUT, ""))
    size = output.dims[-1] if output is not None and output.dims else -1
    return size if size > 0 else None


def inputs(value: Any) -> list[str | list[int]]:
    """`input` as a list of texts or of token-id lists, each checked and bounded."""
    if isinstance(value, str) or (isinstance(value, list) and value and _is_ids(value)):
        value = [value]
    if not isinstance(value, list) or not value:
        raise OpenAIError(
            "'input' must be a string, a list of strings, a list of token ids or a list of such lists", param="input"
        )
    if len(value) > MAX_INPUTS:
        raise OpenAIError(f"'input' holds {len(value)} inputs; at most {MAX_INPUTS} are allowed", param="input")
    for index, item in enumerate(value):
        if isinstance(item, str):
            if not item:
                raise OpenAIError(f"input {index} is empty: it needs at least one character", param="input")
            if len(item) > MAX_INPUT_CHARS:
                raise OpenAIError(
                    f"input {index} has {len(item)} characters; at most {MAX_INPUT_CHARS} characters are allowed",
                    param="input",
                )
        elif isinstance(item, list) and item and _is_ids(item):
            if len(item) > MAX_INPUT_TOKENS:
                raise OpenAIError(
                    f"input {index} has {len(item)} token ids; at most {MAX_INPUT_TOKENS} token ids are allowed",
                    param="input",
                )
        else:
            raise OpenAIError(
                f"input {index} must be a non-empty string or a non-empty list of token ids (whole numbers from 0)",
                param="input",
            )
    return value


def _is_ids(value: list[Any]) -> bool:
    return all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= fields.INT64[1] for i in value)


class Embeddings:
    """One /v1/embeddings call: the checked request, its model's requests, then the answer."""

    def __init__(self, server: InferenceServer, body: bytes) -> None:
        try:
            document = parse_json_object(body)
        except InferaError as exc:
            raise OpenAIError(exc.message) from None
        self.model, self.route = fields.model_route(server, document)
        config = self.route.served.config
        if not is_embedding_model(config):
            raise OpenAIError(
                f"model '{self.model}' does not make embeddings: its config names no '{EMBEDDING_INPUT}' and "
                f"'{EMBEDDING_OUTPUT}' parameters",
                param="model",
            )
        self.config = config
        self.inputs = inputs(document.get("input"))
        if any(not isinstance(item, str) for item in self.inputs) and not config.parameters.get(TOKEN_IDS_INPUT):
            raise OpenAIError(
                f"model '{self.model}' takes no token ids: its config names no '{TOKEN_IDS_INPUT}'", param="input"
            )
        self.encoding = document.get("encoding_format") or "float"
        if self.encoding not in ENCODING_FORMATS:
            raise OpenAIError(
                f"'encoding_format' must be one of {', '.join(ENCODING_FORMATS)}, got {self.encoding!r}",
                param="encoding_format",
            )
        wanted = fields.integer(document, "dimensions", 1, 65536)
        if wanted is not None and wanted != dimension(config):
            raise OpenAIError(
                f"'dimensions' is not supported by model '{self.model}': its vectors have {dimension(config)} "
                f"dimensions, and it does not shorten them (asked {wanted})",
                param="dimensions",
            )
        user = document.get("user")
        if user is not None and not isinstance(user, str):
            raise OpenAIError("'user' must be a string", param="user")
        self.server = server
        self.prompt_tokens = 0  # what the model read, once it answered

    def reservation(self) -> int:
        """The tokens reserved until the model's count is known: each input's length (characters or ids)."""
        return sum(len(item) for item in self.inputs)

    def request(self, item: str | list[int]) -> InferenceRequest:
        parameters = self.config.parameters
        batched = self.config.max_batch_size > 0
        if isinstance(item, str):
            name, array = parameters[EMBEDDING_INPUT], np.array([item.encode()], dtype=np.object_)
        else:
            name, array = parameters[TOKEN_IDS_INPUT], np.array(item, dtype=np.int64)
        return InferenceRequest(self.model, {name: array.reshape(1, -1) if batched else array}, batch_size=1)

    async def answer(self) -> bytes:
        """Every input's vector, run as one request each (so they batch), in input order, with the usage."""
        calls = (self.server.infer(self.request(item), self.route) for item in self.inputs)
        responses = await asyncio.gather(*calls, return_exceptions=True)
        for failed in responses:
            if isinstance(failed, InferaError):
                kind = "invalid_request_error" if failed.status < 500 else "server_error"
                raise OpenAIError(failed.message, failed.status, kind, "input")
            if isinstance(failed, BaseException):
                raise failed
        parameters = self.config.parameters
        data = []
        tokens = 0
        for index, (item, response) in enumerate(zip(self.inputs, responses, strict=True)):
            vector = np.asarray(response.outputs[parameters[EMBEDDING_OUTPUT]], dtype="<f4").reshape(-1)
            count = response.outputs.get(parameters.get(TOKEN_COUNT_OUTPUT, ""))
            tokens += int(np.asarray(count).reshape(-1)[0]) if count is not None else len(item)
            encoded: Any = base64.b64encode(vector.tobytes()).decode() if self.encoding == "base64" else vector
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        self.prompt_tokens = tokens
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        document = {"object": "list", "data": data, "model": self.model, "usage": usage}
        return orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)


async def embed(
    server: InferenceServer, body: bytes, gate: BudgetGate | None = None, principal: Principal = ANONYMOUS
) -> bytes:
    """POST /v1/embeddings: the answer as JSON, held to the caller's budgets and counted as its prompt tokens."""
    embeddings = Embeddings(server, body)
    admission = await openai_budgets.admit_tokens(gate or BudgetGate(), principal, embeddings.reservation())
    try:
        return await embeddings.answer()
    finally:
        await admission.settle(Usage(prompt=embeddings.prompt_tokens))

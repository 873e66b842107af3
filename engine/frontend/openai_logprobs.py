"""Logprobs in OpenAI's two shapes, from the entries a model reports for its tokens (the `llm` backend's `logprobs`
output: a JSON list of {"token_id", "token", "logprob", "top_logprobs": [{"token_id", "token", "logprob"}]}).

As vLLM writes them: a completion's `logprobs` is {"tokens", "token_logprobs", "top_logprobs", "text_offset"},
each top_logprobs item a {token: logprob} object of the chosen token and the k most likely, text offsets counted
in the tokens' characters from where the text of that answer or chunk begins; a chat's is {"content": [{"token",
"logprob", "bytes", "top_logprobs": the k most likely, each {"token", "logprob", "bytes"}}]}. A logprob below
FLOOR (minus infinity included) is written as FLOOR, a number JSON can carry.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

FLOOR = -9999.0


def entries_of(array: np.ndarray | None) -> list[dict[str, Any]]:
    """The token entries one response carries (none when the output is absent or empty)."""
    if array is None or not np.asarray(array).size:
        return []
    item = np.asarray(array).reshape(-1)[0]
    entries = json.loads(item.decode("utf-8") if isinstance(item, bytes) else str(item))
    return entries if isinstance(entries, list) else []


def _logprob(value: Any) -> float:
    return max(float(value), FLOOR)


def completion_logprobs(entries: list[dict[str, Any]], offset: int = 0) -> dict[str, Any]:
    """A completion choice's `logprobs`; `offset` is where its text begins (a stream's characters sent before)."""
    tokens: list[str] = []
    token_logprobs: list[float] = []
    top_logprobs: list[dict[str, float]] = []
    text_offset: list[int] = []
    for entry in entries:
        token = entry["token"]
        tokens.append(token)
        token_logprobs.append(_logprob(entry["logprob"]))
        top = {token: _logprob(entry["logprob"])}
        for alternative in entry["top_logprobs"]:
            top.setdefault(alternative["token"], _logprob(alternative["logprob"]))
        top_logprobs.append(top)
        text_offset.append(offset)
        offset += len(token)
    return {
        "tokens": tokens,
        "token_logprobs": token_logprobs,
        "top_logprobs": top_logprobs,
        "text_offset": text_offset,
    }


def chat_logprobs(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """A chat choice's `logprobs`: its tokens' content list."""
    content = []
    for entry in entries:
        item = _chat_token(entry)
        item["top_logprobs"] = [_chat_token(alternative) for alternative in entry["top_logprobs"]]
        content.append(item)
    return {"content": content}


def _chat_token(entry: dict[str, Any]) -> dict[str, Any]:
    token = entry["token"]
    return {"token": token, "logprob": _logprob(entry["logprob"]), "bytes": list(token.encode("utf-8", "replace"))}

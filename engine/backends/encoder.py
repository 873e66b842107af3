"""The `encoder` backend: a sentence encoder (a BERT-family Hugging Face folder, as sentence-transformers saves one)
that turns each text into one vector: the transformer's last hidden states pooled (mean over the real tokens, or the
first token's) and, as the model's own sentence-transformers modules say, scaled to unit length.

The version folder is the model's folder: `config.json`, `*.safetensors` and the tokenizer files, and where
sentence-transformers wrote them `modules.json` (a `Normalize` module: unit vectors), `sentence_bert_config.json`
(`max_seq_length`) and `1_Pooling/config.json` (the pooling mode); config parameters `pooling` ("mean", "cls"),
`normalize` (true, false) and `max_seq_length` override them. A model whose modules add a layer after pooling
(`Dense`) is refused at load: its vectors would not be these. Weights are data (safetensors only; pickles refused)
and the code that runs is transformers' own: loading runs no user code (`code_in` is None).

Inputs, per row of a batch: `text` (STRING [1]; stripped of surrounding whitespace, as sentence-transformers does)
or `token_ids` (INT64 [-1], the ids the model reads as they are, special tokens included, as /tokenize gives them).
Texts and ids longer than `max_seq_length` tokens are cut to it. Outputs: `embedding` (FP32 [hidden size]) and
`token_count` (INT32 [1], the tokens the model read). The dynamic batcher groups requests; one batch is one forward
pass, padded to its longest row. Config parameters `openai_embedding_input`, `openai_token_ids_input`,
`openai_embedding_output` and `openai_token_count_output` name those tensors for /v1/embeddings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from engine.backends import register_backend
from engine.backends.base import Backend
from engine.backends.llm_parameters import parameter, positive, switch
from engine.config.model_config import ModelConfig, TensorConfig
from engine.errors import InferaError, InvalidArgument, LoadError
from engine.types import InferenceRequest

TEXT_INPUT = "text"
TOKEN_IDS_INPUT = "token_ids"  # nosec B105
EMBEDDING_OUTPUT = "embedding"
TOKEN_COUNT_OUTPUT = "token_count"  # nosec B105
POOLING_MODES = ("mean", "cls")
DEFAULT_PARAMETERS = {
    "openai_embedding_input": TEXT_INPUT,
    "openai_token_ids_input": TOKEN_IDS_INPUT,
    "openai_embedding_output": EMBEDDING_OUTPUT,
    "openai_token_count_output": TOKEN_COUNT_OUTPUT,
}
_ST_MODULES = "sentence_transformers.models."


@dataclass(frozen=True, slots=True)
class EncoderSettings:
    """How the hidden states become one vector, and how many tokens are read: the folder's word, then the config's."""

    pooling: str
    normalize: bool
    max_seq_length: int
    dimension: int

    @classmethod
    def read(cls, config: ModelConfig, folder: Path) -> EncoderSettings:
        modules = _json(folder / "modules.json", [])
        kinds = [str(m.get("type", "")).removeprefix(_ST_MODULES) for m in modules if isinstance(m, dict)]
        extra = [kind for kind in kinds if kind not in ("Transformer", "Pooling", "Normalize")]
        if extra:
            raise LoadError(
                f"model '{config.name}': its sentence-transformers modules add {', '.join(extra)} after the "
                "transformer; the encoder backend serves Transformer, Pooling and Normalize only"
            )
        pooling_file = next(
            (folder / str(m.get("path", "")) for m in modules if str(m.get("type", "")).endswith("Pooling")), None
        )
        pooled = _json(pooling_file / "config.json", {}) if pooling_file is not None else {}
        found = "cls" if pooled.get("pooling_mode_cls_token") else "mean"
        pooling = parameter(config, "pooling", str, found)
        if pooling not in POOLING_MODES:
            raise LoadError(
                f"model '{config.name}': parameter 'pooling' must be one of {', '.join(POOLING_MODES)}, got '{pooling}'"
            )
        normalize = parameter(config, "normalize", switch, "Normalize" in kinds or not modules)
        hidden = _json(folder / "config.json", {})
        positions = int(hidden.get("max_position_embeddings", 512))
        default_length = int(_json(folder / "sentence_bert_config.json", {}).get("max_seq_length", positions))
        length = positive("max_seq_length", parameter(config, "max_seq_length", int, default_length), config)
        if length > positions:
            raise LoadError(
                f"model '{config.name}': parameter 'max_seq_length' ({length}) is over the model's "
                f"max_position_embeddings ({positions})"
            )
        return cls(pooling, normalize, length, int(hidden.get("hidden_size", -1)))


@register_backend
class EncoderBackend(Backend):
    """One instance: the transformer and its tokenizer on one device; one forward pass per batch."""

    name = "encoder"

    @classmethod
    def autocomplete(cls, config: ModelConfig, version_path: Path) -> ModelConfig:
        """The text and token-id inputs, the embedding and token-count outputs, the OpenAI parameters, where unset."""
        folder = _folder(version_path)
        dimension = int(_json(folder / "config.json", {}).get("hidden_size", -1))
        return replace(
            config,
            input=config.input
            or [
                TensorConfig(TEXT_INPUT, "TYPE_STRING", [1], optional=True),
                TensorConfig(TOKEN_IDS_INPUT, "TYPE_INT64", [-1], optional=True),
            ],
            output=config.output
            or [
                TensorConfig(EMBEDDING_OUTPUT, "TYPE_FP32", [dimension]),
                TensorConfig(TOKEN_COUNT_OUTPUT, "TYPE_INT32", [1]),
            ],
            parameters=DEFAULT_PARAMETERS | dict(config.parameters),
        )

    def load(self) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        if self.config.max_batch_size < 1:
            raise LoadError(f"model '{self.config.name}': the encoder backend batches: set max_batch_size")
        folder = _folder(self.version_path)
        self.settings = EncoderSettings.read(self.config, folder)
        try:
            # a local folder, never the hub (local_files_only): no revision to pin
            self.tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)  # nosec B615
            model = AutoModel.from_pretrained(  # nosec B615
                folder, local_files_only=True, use_safetensors=True, trust_remote_code=False, dtype=torch.float32
            )
        except (OSError, ValueError) as exc:
            raise LoadError(f"model '{self.config.name}': {exc}") from None
        self.model = model.to(str(self.device)).eval()
        self.vocab_size = int(self.model.config.vocab_size)
        self.pad_id = int(self.tokenizer.pad_token_id or 0)

    def prepare_requests(self, requests: list[InferenceRequest]) -> list[list[int] | InferaError]:
        """Every row's token ids (cut to max_seq_length), or its request's error in each of its rows."""
        rows: list[list[int] | InferaError] = []
        for request in requests:
            try:
                rows.extend(self._rows(request))
            except InferaError as exc:
                rows.extend([exc] * request.batch_size)
        return rows

    def _rows(self, request: InferenceRequest) -> list[list[int]]:
        limit = self.settings.max_seq_length
        ids = request.inputs.get(TOKEN_IDS_INPUT)
        if ids is not None and np.asarray(ids).size:
            rows = np.asarray(ids, dtype=np.int64).reshape(request.batch_size, -1)
            if rows.min() < 0 or rows.max() >= self.vocab_size:
                raise InvalidArgument(
                    f"'{TOKEN_IDS_INPUT}' holds a token id outside model '{self.config.name}' (vocabulary of "
                    f"{self.vocab_size})"
                )
            return [row[:limit].tolist() for row in rows]
        texts = request.inputs.get(TEXT_INPUT)
        if texts is None:
            raise InvalidArgument(f"model '{self.config.name}' needs '{TEXT_INPUT}' or '{TOKEN_IDS_INPUT}'")
        strings = [t.decode("utf-8", errors="replace") if isinstance(t, bytes) else str(t) for t in texts.reshape(-1)]
        encoded = self.tokenizer([s.strip() for s in strings], truncation=True, max_length=limit)
        return [list(row) for row in encoded["input_ids"]]

    def execute(self, batch: list[list[int] | InferaError]) -> list[tuple[np.ndarray, int] | InferaError]:
        """One forward pass over the batch's good rows, padded to the longest; each row's vector and length."""
        good = [row for row in batch if not isinstance(row, InferaError) and row]
        vectors = iter(self._encode(good) if good else [])
        results: list[tuple[np.ndarray, int] | InferaError] = []
        for row in batch:
            if isinstance(row, InferaError):
                results.append(row)
            elif not row:
                results.append(InvalidArgument("an input to embed is empty: it needs at least one token"))
            else:
                results.append((next(vectors), len(row)))
        return results

    def _encode(self, rows: list[list[int]]) -> np.ndarray:
        import torch

        width = max(len(row) for row in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, : len(row)] = 1
        device = str(self.device)
        with torch.inference_mode():
            hidden = self.model(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
            if self.settings.pooling == "cls":
                pooled = hidden[:, 0]
            else:
                weights = mask.to(device).unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
            if self.settings.normalize:
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled.float().cpu().numpy()

    def split(self, outputs: list[Any], batch_sizes: list[int]) -> list[dict[str, np.ndarray] | InferaError]:
        """Each request's rows as its `embedding` and `token_count`, or the first error among them."""
        answers: list[dict[str, np.ndarray] | InferaError] = []
        start = 0
        for size in batch_sizes:
            rows = outputs[start : start + size]
            start += size
            error = next((row for row in rows if isinstance(row, InferaError)), None)
            if error is not None:
                answers.append(error)
                continue
            answers.append(
                {
                    EMBEDDING_OUTPUT: np.stack([vector for vector, _ in rows]).astype(np.float32),
                    TOKEN_COUNT_OUTPUT: np.array([[count] for _, count in rows], dtype=np.int32),
                }
            )
        return answers

    def unload(self) -> None:
        self.model = None


def _folder(version_path: Path) -> Path:
    """The version folder when it is a Hugging Face folder of safetensors weights (pickles refused)."""
    from engine.llm.weights import find_weights

    source = find_weights(version_path)
    if source.gguf_file is not None:
        raise LoadError(f"the encoder backend reads a Hugging Face folder, not a GGUF file ('{source.gguf_file}')")
    return source.folder


def _json(path: Path, default: Any) -> Any:
    """A JSON file's document, or `default` when there is no such file."""
    if not path.is_file():
        return default
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise LoadError(f"'{path.name}' is not JSON: {exc}") from None

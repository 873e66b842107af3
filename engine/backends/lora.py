"""The `lora` backend: a LoRA adapter served as a model of its own, on the engine of a loaded `llm` base model.

A version folder holds PEFT's `adapter_config.json` and `adapter_model.safetensors`; the model's config names its
base with the parameter `base_model` (a model this server has loaded with the llm backend). Requests name the
adapter model, as vLLM's `--lora-modules` are named: they are tokenized and checked by the base's backend, then run
by the base's engine with the adapter's slot, so sequences of several adapters and of the base share each batch
(engine/llm/adapters.py applies each adapter's deltas to its own rows); their prefix-cache entries are the adapter's
own. The inputs, outputs and OpenAI parameters are the llm backend's, and so are its tokenizer (/tokenize,
/detokenize) and its grammars (structured outputs). Loading reads data only (`code_in` None); a
trial load checks the adapter's files alone, a real one also fits it to every loaded instance of the base (a base
loaded later gets it at its first request), within the base's `max_loras` parameter (16 adapters by default).
Unloading the adapter frees its slots.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.backends import register_backend
from engine.backends.base import Backend
from engine.backends.llm import DEFAULT_INPUTS, DEFAULT_OUTPUTS, DEFAULT_PARAMETERS
from engine.backends.llm_parameters import parameter, positive
from engine.config.model_config import ModelConfig
from engine.errors import InferaError, LoadError, Unavailable
from engine.types import InferenceRequest

BASE_MODEL = "base_model"
MAX_LORAS = "max_loras"  # the base's parameter: adapters on it at most (vLLM's --max-loras)
DEFAULT_MAX_LORAS = 16


@register_backend
class LoRABackend(Backend):
    """One adapter: its matrices, and its slot on each instance of the base that serves it."""

    name = "lora"

    @classmethod
    def autocomplete(cls, config: ModelConfig, version_path: Path) -> ModelConfig:
        """Decoupled, with the llm backend's inputs, outputs and OpenAI parameters where unset."""
        return replace(
            config,
            decoupled=True,
            input=config.input or [replace(t) for t in DEFAULT_INPUTS],
            output=config.output or [replace(t) for t in DEFAULT_OUTPUTS],
            parameters=DEFAULT_PARAMETERS | dict(config.parameters),
        )

    def load(self) -> None:
        from engine.llm.adapters import LoRAAdapter

        self.base_name = str(self.config.parameters.get(BASE_MODEL, "")).strip()
        if not self.base_name:
            raise LoadError(
                f"model '{self.config.name}': a LoRA adapter's config names its base: parameter '{BASE_MODEL}'"
            )
        if not self.config.decoupled:
            raise LoadError(f"model '{self.config.name}': an adapter streams as its base: set decoupled: true")
        self.adapter = LoRAAdapter.read(self.version_path, self.config.name)
        self._lock = threading.Lock()
        self._slots: dict[int, tuple[Any, int]] = {}  # id(base backend) -> (that backend, the adapter's slot)
        self._turn = itertools.count()
        self.max_model_len = 0  # the base's, once it is found
        if self.context.services is None:  # a trial load: the files are checked, nothing serves
            return
        served = self._served_bases()
        if not served:
            raise LoadError(
                f"model '{self.config.name}': its base model '{self.base_name}' is not loaded with the llm backend"
            )
        self.max_model_len = served[0][0].max_model_len

    # --- the base's tokenizer and grammars, for /tokenize, /detokenize and structured outputs ---------------------
    def _base(self) -> Any:
        served = self._served_bases()
        if not served:
            raise Unavailable(f"model '{self.config.name}': its base model '{self.base_name}' is not loaded")
        return served[0][0]

    def tokenize(self, *args: Any, **kwargs: Any) -> list[int]:
        return self._base().tokenize(*args, **kwargs)

    def detokenize(self, token_ids: list[int]) -> str:
        return self._base().detokenize(token_ids)

    def token_strings(self, token_ids: list[int]) -> list[str]:
        return self._base().token_strings(token_ids)

    def compile_structured(self, value: object) -> Any:
        return self._base().compile_structured(value)

    def _served_bases(self) -> list[tuple[Any, int]]:
        """(base backend, slot) for every loaded instance of the base, the adapter added where it is new."""
        from engine.llm.adapters import LoRASet, bases

        found = bases(self.context.services, self.base_name)
        with self._lock:
            live = {id(base) for base in found}
            self._slots = {key: pair for key, pair in self._slots.items() if key in live}
            for base in found:
                if id(base) in self._slots:
                    continue
                runner = base.runner
                if runner.lora is None:
                    limit = parameter(base.config, MAX_LORAS, int, DEFAULT_MAX_LORAS)
                    lora = LoRASet(runner.model, runner.dtype, runner.device, positive(MAX_LORAS, limit, base.config))
                    lora.slot_of = base.engine.adapter_of
                    runner.lora = lora
                self._slots[id(base)] = (base, runner.lora.add(self.adapter))
            return list(self._slots.values())

    def prepare_requests(self, requests: list[InferenceRequest]) -> tuple[Any, list[Any]]:
        """The base's generation requests (checked by it), each with this adapter's slot and prefix-cache key."""
        try:
            served = self._served_bases()
        except LoadError as exc:  # a base loaded again since, that takes no more adapters
            error = Unavailable(exc.reason)
            return None, [(request, error) for request in requests]
        if not served:
            error = Unavailable(f"model '{self.config.name}': its base model '{self.base_name}' is not loaded")
            return None, [(request, error) for request in requests]
        base, slot = served[next(self._turn) % len(served)]
        prepared = base.prepare_requests(requests)
        for _, generation in prepared:
            if not isinstance(generation, InferaError):
                generation.adapter = slot
                generation.cache_key = ("lora", self.config.name, generation.cache_key)
        return base, prepared

    def execute(self, batch: tuple[Any, list[Any]]) -> list[Any]:
        base, prepared = batch
        if base is None:
            return [error for _, error in prepared]
        return base.execute(prepared)

    def split(self, outputs: list[Any], batch_sizes: list[int]) -> list[Any]:
        return outputs

    def unload(self) -> None:
        with getattr(self, "_lock", threading.Lock()):
            for base, slot in getattr(self, "_slots", {}).values():
                if base.runner is not None and base.runner.lora is not None:
                    base.runner.lora.remove(slot)
            self._slots = {}

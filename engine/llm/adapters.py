"""LoRA adapters on a loaded base model: PEFT's files read as data, their deltas added per row of a mixed batch.

An adapter is PEFT's `adapter_config.json` (`r`, `lora_alpha`, `use_rslora`, `target_modules`) beside
`adapter_model.safetensors` (`base_model.model.<module>.lora_A.weight` [r, in] and `.lora_B.weight` [out, r] for
each adapted Linear layer). Only what this code applies is taken: Linear layers inside the decoder layers, no bias,
no DoRA, no `modules_to_save`, no per-module ranks or alphas; anything else is a LoadError naming it, so no adapter
is ever served half applied. A Linear layer's output becomes `W x + scale * B (A x)`, `scale` = alpha / r (alpha /
sqrt(r) with rsLoRA), as PEFT computes it (without dropout, as in eval).

`LoRASet` belongs to one model runner: adapters (at most the base's `max_loras` parameter, 16 by default: each holds
its matrices on the base's device) are added to it under a slot (1, 2, ...; 0 is the base alone) from
any thread; the engine's thread calls `begin_step` before each forward pass with the step's chunks, so every token
row knows its sequence's slot (`slot_of`, the engine's), and forward hooks on the adapted Linear layers (installed
on that thread, between passes) add each slot's delta to its own rows only: sequences of several adapters and of
the base share one batch. A step without adapter rows costs one check per adapted layer.

`register_base` / `bases`: the llm backends that serve a model, per server (its `ModelServices`), so an adapter
model's backend (engine/backends/lora.py) finds the base it names.
"""

from __future__ import annotations

import json
import math
import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine.errors import LoadError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_PEFT_PREFIX = "base_model.model."
_UNSUPPORTED = {
    "use_dora": "DoRA",
    "modules_to_save": "modules_to_save",
    "rank_pattern": "per-module ranks (rank_pattern)",
    "alpha_pattern": "per-module alphas (alpha_pattern)",
    "layers_to_transform": "layers_to_transform",
}


@dataclass(frozen=True, slots=True)
class LoRAAdapter:
    """One adapter's matrices by module name ("model.layers.0.self_attn.q_proj" -> (A [r, in], B [out, r])), its
    scale, and its rank."""

    name: str
    rank: int
    scale: float
    weights: dict[str, tuple[torch.Tensor, torch.Tensor]]

    @classmethod
    def read(cls, folder: Path, name: str) -> LoRAAdapter:
        """PEFT's two files in `folder`, checked; a LoadError names what is missing or not supported."""
        from safetensors.torch import load_file

        folder = Path(folder)
        for needed in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
            if not (folder / needed).is_file():
                raise LoadError(f"adapter '{name}': its version folder has no {needed}")
        try:
            config = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
        except ValueError as exc:
            raise LoadError(f"adapter '{name}': {ADAPTER_CONFIG} is not JSON: {exc}") from None
        if not isinstance(config, dict) or str(config.get("peft_type", "LORA")).upper() != "LORA":
            raise LoadError(f"adapter '{name}': {ADAPTER_CONFIG} is not a LoRA adapter's (peft_type LORA)")
        for key, what in _UNSUPPORTED.items():
            if config.get(key):
                raise LoadError(f"adapter '{name}': {what} is not supported")
        if config.get("bias", "none") != "none":
            raise LoadError(f"adapter '{name}': bias '{config.get('bias')}' is not supported (only 'none')")
        rank, alpha = config.get("r"), config.get("lora_alpha")
        if not isinstance(rank, int) or rank < 1 or not isinstance(alpha, (int, float)):
            raise LoadError(f"adapter '{name}': {ADAPTER_CONFIG} needs a rank 'r' >= 1 and a number 'lora_alpha'")
        scale = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
        tensors = load_file(str(folder / ADAPTER_WEIGHTS))
        halves: dict[str, dict[str, torch.Tensor]] = {}
        for key, tensor in tensors.items():
            module, _, half = key.removeprefix(_PEFT_PREFIX).rpartition(".lora_")
            if half not in ("A.weight", "B.weight") or not module.startswith("model.layers."):
                raise LoadError(
                    f"adapter '{name}': weight '{key}' is not a LoRA matrix of a decoder layer's Linear layer"
                )
            halves.setdefault(module, {})[half[0]] = tensor
        weights: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for module, pair in sorted(halves.items()):
            a, b = pair.get("A"), pair.get("B")
            if a is None or b is None or a.dim() != 2 or b.dim() != 2 or a.shape[0] != rank or b.shape[1] != rank:
                raise LoadError(
                    f"adapter '{name}': module '{module}' needs lora_A [{rank}, in] and lora_B [out, {rank}]"
                )
            weights[module] = (a, b)
        if not weights:
            raise LoadError(f"adapter '{name}': {ADAPTER_WEIGHTS} holds no LoRA matrices")
        return cls(name, rank, float(scale), weights)

    def fitted(self, model: torch.nn.Module, dtype: torch.dtype, device: torch.device) -> LoRAAdapter:
        """The adapter checked against the base's Linear layers, its matrices in the base's dtype and device."""
        modules = dict(model.named_modules())
        weights = {}
        for module_name, (a, b) in self.weights.items():
            module = modules.get(module_name)
            width = (getattr(module, "in_features", None), getattr(module, "out_features", None))
            if module is None or None in width:
                raise LoadError(f"adapter '{self.name}': the base model has no Linear layer '{module_name}'")
            if (a.shape[1], b.shape[0]) != width:
                raise LoadError(
                    f"adapter '{self.name}': module '{module_name}' maps {a.shape[1]} -> {b.shape[0]}, the base's "
                    f"Linear layer {width[0]} -> {width[1]}"
                )
            weights[module_name] = (a.to(device=device, dtype=dtype), b.to(device=device, dtype=dtype))
        return LoRAAdapter(self.name, self.rank, self.scale, weights)


class LoRASet:
    """The adapters of one model runner by slot, and the forward hooks that apply them to their rows."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype, device: torch.device, limit: int = 16) -> None:
        self.model = model
        self.limit = limit  # adapters at most (the base's `max_loras`)
        self.dtype = dtype
        self.device = device
        self.slot_of: Callable[[Hashable], int] = lambda seq_id: 0  # the engine's: a sequence's adapter slot
        self._lock = threading.Lock()
        self._adapters: dict[int, LoRAAdapter] = {}  # replaced whole on change: the engine thread reads a snapshot
        self._next_slot = 1
        self._hooked: set[str] = set()
        self._rows: list[tuple[LoRAAdapter, torch.Tensor]] = []  # this step's adapters and their token rows

    def add(self, adapter: LoRAAdapter) -> int:
        """Fit `adapter` to the base and give it a slot (from any thread); its hooks go in before the next pass."""
        fitted = adapter.fitted(self.model, self.dtype, self.device)
        with self._lock:
            if len(self._adapters) >= self.limit:
                raise LoadError(
                    f"adapter '{adapter.name}': its base serves at most {self.limit} adapters (its parameter "
                    "'max_loras'); unload one first"
                )
            slot = self._next_slot
            self._next_slot += 1
            self._adapters = self._adapters | {slot: fitted}
        return slot

    def remove(self, slot: int) -> None:
        with self._lock:
            self._adapters = {s: a for s, a in self._adapters.items() if s != slot}

    def __len__(self) -> int:
        return len(self._adapters)

    def begin_step(self, chunks: Sequence[Any]) -> None:
        """On the engine's thread, before a forward pass: each adapter slot's token rows of the step's row."""
        adapters = self._adapters
        self._rows = []
        if not adapters:
            return
        self._install_hooks(adapters)
        rows: dict[int, list[int]] = {}
        start = 0
        for chunk in chunks:
            slot = self.slot_of(chunk.seq_id)
            if slot in adapters:
                rows.setdefault(slot, []).extend(range(start, start + chunk.num_tokens))
            start += chunk.num_tokens
        self._rows = [
            (adapters[slot], torch.tensor(indices, dtype=torch.long, device=self.device))
            for slot, indices in rows.items()
        ]

    def _install_hooks(self, adapters: dict[int, LoRAAdapter]) -> None:
        wanted = {module for adapter in adapters.values() for module in adapter.weights} - self._hooked
        if not wanted:
            return
        for module_name, module in self.model.named_modules():
            if module_name in wanted:
                module.register_forward_hook(self._hook(module_name))
                self._hooked.add(module_name)

    def _hook(self, module_name: str) -> Callable[..., torch.Tensor | None]:
        def add_deltas(module: torch.nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor | None:
            if not self._rows:
                return None
            x = args[0]
            for adapter, rows in self._rows:
                pair = adapter.weights.get(module_name)
                if pair is None:
                    continue
                a, b = pair
                picked = x[0, rows]
                output[0, rows] += (picked @ a.T @ b.T) * adapter.scale
            return output

        return add_deltas


_bases: weakref.WeakKeyDictionary[Any, dict[str, list[weakref.ref]]] = weakref.WeakKeyDictionary()
_bases_lock = threading.Lock()


def register_base(services: Any, name: str, backend: Any) -> None:
    """An llm backend that serves model `name` on the server whose model services are `services`."""
    if services is None:  # a trial load: nothing serves
        return
    with _bases_lock:
        named = _bases.setdefault(services, {}).setdefault(name, [])
        named[:] = [ref for ref in named if ref() is not None] + [weakref.ref(backend)]


def bases(services: Any, name: str) -> list[Any]:
    """The loaded llm backends (their instances, every version) that serve `name` on that server."""
    with _bases_lock:
        refs = list(_bases.get(services, {}).get(name, []))
    found = [ref() for ref in refs]
    return [backend for backend in found if backend is not None and getattr(backend, "engine", None) is not None]

"""Where a language model's weights are and how they load: a GGUF file or a Hugging Face folder, data only.

A version folder holds either a `.gguf` file (weights, tokenizer and chat template in one file; dequantised by
transformers and gguf to the dtype asked for) or a Hugging Face folder: `config.json`, `*.safetensors` and the
tokenizer files (`tokenizer.json`, `tokenizer_config.json` with its chat template), in the version folder itself or
in a sub-folder named by `default_model_filename`. Weights are data: a folder holding pickled weights (`*.bin`,
`*.pt`, `*.pth`, `*.pkl`, `*.ckpt`) is refused before transformers opens anything, and nothing is downloaded
(`local_files_only`, `HF_HUB_OFFLINE`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import LoadError

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
DTYPES = ("float32", "bfloat16", "float16")
CPU_BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of CPUs with bfloat16 dot products


@dataclass(frozen=True, slots=True)
class WeightsSource:
    """A GGUF file (`gguf_file` inside `folder`) or a Hugging Face folder (`gguf_file` None)."""

    folder: Path
    gguf_file: str | None = None

    @property
    def shown(self) -> str:
        return self.gguf_file or f"{self.folder.name}/config.json"


def find_weights(version_path: Path, filename: str = "") -> WeightsSource:
    """The weights a version folder holds (`filename`: default_model_filename, a .gguf file or a folder)."""
    version_path = Path(version_path)
    if filename:
        target = version_path / filename
        if target.is_file() and target.suffix == ".gguf":
            return WeightsSource(target.parent, target.name)
        if target.is_dir():
            return _hf_folder(target)
        raise LoadError(f"model file '{filename}' is neither a .gguf file nor a Hugging Face folder in the version")
    ggufs = sorted(p.name for p in version_path.glob("*.gguf") if p.is_file())
    if len(ggufs) > 1:
        raise LoadError(
            f"version folder '{version_path.name}' holds {len(ggufs)} .gguf files ({', '.join(ggufs)}): "
            "set default_model_filename to the one that serves"
        )
    if ggufs:
        return WeightsSource(version_path, ggufs[0])
    if (version_path / "config.json").is_file():
        return _hf_folder(version_path)
    raise LoadError(
        f"version folder '{version_path.name}' holds no .gguf file and no Hugging Face folder (config.json and "
        "*.safetensors)"
    )


def _hf_folder(folder: Path) -> WeightsSource:
    if not (folder / "config.json").is_file():
        raise LoadError(f"Hugging Face folder '{folder.name}' has no config.json")
    pickles = sorted(p.name for p in folder.rglob("*") if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise LoadError(
            f"Hugging Face folder '{folder.name}' holds pickled weights ({', '.join(pickles[:3])}): loading them "
            "could run code; only *.safetensors weights are accepted"
        )
    if not any(folder.glob("*.safetensors")):
        raise LoadError(f"Hugging Face folder '{folder.name}' has no *.safetensors weights")
    return WeightsSource(folder)


def torch_dtype(name: str) -> Any:
    import torch

    if name not in DTYPES:
        raise LoadError(f"parameter 'dtype' must be one of {', '.join(DTYPES)} or auto, got '{name}'")
    return getattr(torch, name)


def native_bfloat16(device: str, cpuinfo: str | None = None) -> bool:
    """Whether `device` multiplies bfloat16 natively: a CUDA GPU that supports it, or a CPU whose flags (from
    /proc/cpuinfo, or `cpuinfo` given) name AVX512-BF16 or AMX. Without them torch emulates bfloat16 matmuls, many
    times slower than float32's (an AVX2-only CPU)."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    return any(flag in flags for flag in CPU_BFLOAT16_FLAGS)


def load_tokenizer(source: WeightsSource) -> Any:
    """The model's tokenizer (with its chat template), from its own files only."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    try:
        # a local folder, never the hub (local_files_only): no revision to pin
        return AutoTokenizer.from_pretrained(  # nosec B615
            source.folder, gguf_file=source.gguf_file, local_files_only=True
        )
    except (OSError, ValueError, KeyError) as exc:
        raise LoadError(f"the tokenizer of '{source.shown}' does not load: {exc}") from None


def load_model(source: WeightsSource, dtype: str, attn_implementation: str) -> Any:
    """The causal LM in eval mode, its weights in `dtype` (a GGUF file dequantised), safetensors only."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"dtype": torch_dtype(dtype), "local_files_only": True, "use_safetensors": True}
    if source.gguf_file is not None:
        kwargs = {"dtype": kwargs["dtype"], "local_files_only": True, "gguf_file": source.gguf_file}
    try:
        # a local folder, never the hub (local_files_only); no trust_remote_code: the folder's own code never runs
        model = AutoModelForCausalLM.from_pretrained(  # nosec B615
            source.folder, attn_implementation=attn_implementation, **kwargs
        )
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise LoadError(f"the model '{source.shown}' does not load: {exc}") from None
    return model.eval()

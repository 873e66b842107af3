"""The llm backend's `dtype`: "auto" (the default) is bfloat16 only where the device multiplies it natively."""

from __future__ import annotations

import pytest

from engine.backends.llm_parameters import dtype_of
from engine.config.text_format import parse_config_pbtxt
from engine.llm.weights import native_bfloat16

AVX2_ONLY = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
AVX512_BF16 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 avx512f avx512_bf16\n"
AMX = "processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_tile amx_bf16\n"


def config(**parameters: str):
    entries = "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in parameters.items())
    return parse_config_pbtxt(f'name: "m"\nbackend: "llm"\n{entries}')


def test_it_finds_native_bfloat16_in_the_cpu_flags():
    assert not native_bfloat16("cpu", AVX2_ONLY)
    assert native_bfloat16("cpu", AVX512_BF16)
    assert native_bfloat16("cpu", AMX)
    assert not native_bfloat16("cpu", "")


def test_it_picks_float32_or_bfloat16_by_default_as_the_cpu_allows(monkeypatch: pytest.MonkeyPatch):
    import engine.llm.weights as weights

    for cpuinfo, expected in ((AVX2_ONLY, "float32"), (AVX512_BF16, "bfloat16")):
        monkeypatch.setattr(weights, "native_bfloat16", lambda device, info=cpuinfo: native_bfloat16(device, info))
        assert dtype_of(config(), "cpu") == expected
        assert dtype_of(config(dtype="auto"), "cpu") == expected


def test_it_keeps_a_dtype_given_and_float32_under_int8(monkeypatch: pytest.MonkeyPatch):
    import engine.llm.weights as weights

    monkeypatch.setattr(weights, "native_bfloat16", lambda device: True)
    assert dtype_of(config(dtype="float32"), "cpu") == "float32"
    assert dtype_of(config(dtype="float16"), "cpu") == "float16"
    assert dtype_of(config(quantization="int8"), "cpu") == "float32"

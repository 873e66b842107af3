"""The test model factories write config.pbtxt files that Infera's own parser reads back unchanged."""

from __future__ import annotations

import pytest

from engine.config.model_config import DynamicBatching, InstanceGroup
from engine.config.text_format import parse_config_pbtxt
from tests.engine import model_factory as factory


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda repo: factory.make_simple_onnx(repo), factory.simple_config()),
        (lambda repo: factory.make_mlp_onnx(repo, sizes=(4, 3)), factory.mlp_config(sizes=(4, 3))),
        (lambda repo: factory.make_simple_string(repo), factory.simple_string_config()),
        (
            lambda repo: factory.make_torchscript(repo, name="ts"),
            factory.addsub_config("ts", "pytorch_libtorch"),
        ),
    ],
)
def test_it_writes_the_config_it_describes(tmp_path, make, expected):
    model_dir = make(tmp_path)
    assert parse_config_pbtxt((model_dir / "config.pbtxt").read_text()) == expected
    assert sorted(p.name for p in (model_dir / "1").iterdir()) == [expected.model_filename]


def test_it_writes_groups_batching_parameters_and_extra_text(tmp_path):
    config = factory.simple_config(name="full")
    config.instance_group = [InstanceGroup(count=2, kind="KIND_CPU")]
    config.dynamic_batching = DynamicBatching(preferred_batch_size=[4, 8], max_queue_delay_microseconds=100)
    config.parameters = {"intra_op_thread_count": "2"}
    path = factory.write_model_folder(tmp_path, config, 3, "model.onnx", extra_config='default_model_filename: "m"\n')
    parsed = parse_config_pbtxt((tmp_path / "full" / "config.pbtxt").read_text())
    assert path == tmp_path / "full" / "3" / "model.onnx"
    assert parsed.instance_group[0].count == 2 and parsed.instance_group[0].kind == "KIND_CPU"
    assert parsed.dynamic_batching.preferred_batch_size == [4, 8]
    assert parsed.dynamic_batching.max_queue_delay_microseconds == 100
    assert parsed.parameters == {"intra_op_thread_count": "2"}
    assert parsed.default_model_filename == "m"

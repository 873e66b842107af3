"""bench.cpu_split: compute per inference from the batch statistics, each batch's compute counted once."""

from __future__ import annotations

from bench.cpu_split import batch_compute


def _batch(size: int, count: int, ns: int) -> dict:
    return {"batch_size": size, "compute_infer": {"count": count, "ns": ns}}


def test_it_counts_each_batch_compute_once_over_versions_and_batch_sizes() -> None:
    stats = {
        "model_stats": [
            # model-level compute_infer counts a batch's time once per request in it: not what is read
            {
                "name": "m",
                "inference_stats": {"compute_infer": {"count": 40, "ns": 10**9}},
                "batch_stats": [
                    _batch(4, 5, 5_000_000),
                    _batch(16, 1, 4_000_000),
                ],
            },
            {"name": "m", "batch_stats": [_batch(1, 2, 600_000)]},
            {"name": "other", "batch_stats": [_batch(64, 9, 9**9)]},
        ]
    }
    assert batch_compute(stats, "m") == (9_600_000, 4 * 5 + 16 + 2)

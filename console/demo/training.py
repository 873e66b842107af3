"""What the demo trainers share: training tiny models on one torch thread."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run the block on one intra-op thread, then give torch its thread count back.

    The demo models are tiny: on two busy cores a second thread spins more than it computes (the digits MLP trained
    in 110 s with torch's two threads under load, 8 s with one)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)

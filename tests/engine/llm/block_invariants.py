"""The KV-cache block pool's invariants, checked by the block manager's and the scheduler's tests."""

from __future__ import annotations

from collections import Counter

from engine.llm.kv_blocks import BlockManager


def check(manager: BlockManager) -> None:
    """The pool's invariants: each block in one place, ref counts equal to table entries, the cache index true."""
    held = Counter(b for seq in manager._seqs.values() for b in seq.table)
    free = list(manager._free)
    evictable = list(manager._evictable)
    assert len(free) == len(set(free)), "a block twice in the free list"
    assert not set(free) & set(evictable), "a block in both free lists"
    assert not (set(free) | set(evictable)) & set(held), "a held block in a free list"
    assert set(free) | set(evictable) | set(held) == set(range(manager.num_blocks)), "a block lost"
    for block in manager.blocks:
        assert block.ref_count == held.get(block.block_id, 0)
    for key, block_id in manager._cached.items():
        assert manager.blocks[block_id].key == key
    for block_id in evictable:
        assert manager.blocks[block_id].key is not None, "an uncached block in the LRU"
    for block_id in free:
        assert manager.blocks[block_id].key is None, "a cached block in the never-cached free list"
    assert manager.num_free_blocks == len(free) + len(evictable)

"""The KV-cache block manager's bookkeeping: admission, growth, freeing, prefix sharing and LRU eviction."""

from __future__ import annotations

import random

import pytest

from engine.errors import InvalidArgument
from engine.llm.kv_blocks import BlockManager, NoFreeBlocks, block_hash
from tests.engine.llm.block_invariants import check


def prefill(manager: BlockManager, seq_id, tokens, extra_key=None) -> int:
    """Allocate a prompt and mark it all computed, as a step that prefilled it would."""
    cached = manager.allocate(seq_id, tokens, extra_key)
    manager.mark_computed(seq_id, len(tokens))
    return cached


def test_it_refuses_a_pool_or_block_of_nothing():
    with pytest.raises(InvalidArgument, match="num_blocks=0"):
        BlockManager(0, 16)
    with pytest.raises(InvalidArgument, match="block_size=0"):
        BlockManager(4, 0)


def test_it_allocates_a_prompt_in_whole_blocks():
    manager = BlockManager(num_blocks=8, block_size=4)
    assert manager.allocate("a", list(range(10))) == 0
    assert len(manager.block_table("a")) == 3
    assert manager.num_free_blocks == 5
    assert manager.usage == pytest.approx(3 / 8)
    check(manager)


def test_it_admits_by_free_blocks():
    manager = BlockManager(num_blocks=4, block_size=4)
    manager.allocate("a", list(range(12)))  # 3 blocks
    assert manager.can_allocate(list(range(100, 104)))
    assert not manager.can_allocate(list(range(100, 105)))  # 2 blocks, 1 free
    assert not manager.can_allocate(list(range(100, 104)), reserve=1)
    with pytest.raises(NoFreeBlocks) as raised:
        manager.allocate("b", list(range(100, 105)))
    assert raised.value.needed == 2 and raised.value.free == 1
    assert "b" not in manager
    check(manager)


def test_it_refuses_an_empty_prompt_and_a_second_allocation():
    manager = BlockManager(num_blocks=4, block_size=4)
    with pytest.raises(InvalidArgument, match="at least one token"):
        manager.allocate("a", [])
    manager.allocate("a", [1])
    with pytest.raises(ValueError, match="already holds"):
        manager.allocate("a", [1])


def test_it_takes_a_new_block_only_when_the_last_is_full():
    manager = BlockManager(num_blocks=4, block_size=4)
    manager.allocate("a", [1, 2, 3])
    assert manager.append_slot("a", 4) is False
    assert manager.append_slot("a", 5) is True
    assert len(manager.block_table("a")) == 2
    assert manager.num_tokens("a") == 5
    for token in range(6, 9):
        assert manager.append_slot("a", token) is False
    assert manager.append_slot("a", 9) is True
    check(manager)


def test_it_says_when_a_sequence_cannot_grow():
    manager = BlockManager(num_blocks=2, block_size=2)
    manager.allocate("a", [1, 2])
    manager.allocate("b", [3])
    assert manager.can_append_slot("b")  # room in its block
    assert not manager.can_append_slot("a")  # last block full, none free
    with pytest.raises(NoFreeBlocks):
        manager.append_slot("a", 9)
    assert manager.num_tokens("a") == 2
    check(manager)


def test_a_freed_sequences_blocks_return_at_once():
    manager = BlockManager(num_blocks=4, block_size=4, enable_prefix_caching=False)
    manager.allocate("a", list(range(9)))
    assert manager.free("a") == 3
    assert manager.num_free_blocks == 4 and manager.usage == 0
    assert manager.free("a") == 0  # twice is harmless (an abort after a finish)
    check(manager)


def test_it_shares_a_cached_prefix_block_by_block():
    manager = BlockManager(num_blocks=16, block_size=4)
    system = list(range(100, 112))  # three full blocks
    assert prefill(manager, "a", system + [1, 2]) == 0
    cached = prefill(manager, "b", system + [7, 8, 9])
    assert cached == 12
    assert manager.block_table("b")[:3] == manager.block_table("a")[:3]
    assert manager.block_table("b")[3] != manager.block_table("a")[3]  # the partial block stays private
    for block_id in manager.block_table("a")[:3]:
        assert manager.blocks[block_id].ref_count == 2
    assert manager.queries == 14 + 15 and manager.hits == 12
    assert manager.hit_rate == pytest.approx(12 / 29)
    check(manager)


def test_a_prefix_is_only_shared_once_computed():
    manager = BlockManager(num_blocks=16, block_size=4)
    prompt = list(range(20, 30))
    manager.allocate("a", prompt)
    assert manager.cached_prefix(prompt) == 0  # blocks reserved, KV not written yet
    manager.mark_computed("a", 4)  # a first prefill chunk
    assert manager.cached_prefix(prompt) == 4
    manager.mark_computed("a", 10)
    assert manager.cached_prefix(prompt) == 8
    check(manager)


def test_the_last_token_is_always_computed_again():
    manager = BlockManager(num_blocks=16, block_size=4)
    prompt = list(range(8))  # exactly two blocks
    prefill(manager, "a", prompt)
    assert manager.allocate("b", prompt) == 4  # the second block holds the last token: computed again
    assert manager.block_table("b")[0] == manager.block_table("a")[0]
    assert manager.block_table("b")[1] != manager.block_table("a")[1]
    check(manager)


def test_a_different_earlier_block_changes_every_later_key():
    manager = BlockManager(num_blocks=16, block_size=4)
    prefill(manager, "a", [1, 2, 3, 4, 5, 6, 7, 8, 0])
    assert manager.allocate("b", [9, 2, 3, 4, 5, 6, 7, 8, 0]) == 0  # same second block, other parent
    assert block_hash(None, [5, 6, 7, 8]) != block_hash(block_hash(None, [1, 2, 3, 4]), [5, 6, 7, 8])
    check(manager)


def test_the_extra_key_separates_adapters():
    manager = BlockManager(num_blocks=16, block_size=4)
    prompt = list(range(9))
    prefill(manager, "a", prompt, extra_key="adapter-1")
    assert manager.allocate("b", prompt, extra_key="adapter-2") == 0
    assert manager.allocate("c", prompt, extra_key="adapter-1") == 8
    assert manager.allocate("d", prompt) == 0
    check(manager)


def test_it_keeps_a_freed_prefix_cached_and_revives_it():
    manager = BlockManager(num_blocks=8, block_size=4)
    prompt = list(range(13))
    prefill(manager, "a", prompt)
    manager.free("a")
    assert manager.num_free_blocks == 8  # cached blocks count as free
    assert manager.num_cached_blocks == 3
    assert manager.allocate("b", prompt) == 12
    assert manager.usage == pytest.approx(4 / 8)
    check(manager)


def test_it_counts_revived_blocks_when_admitting():
    manager = BlockManager(num_blocks=4, block_size=2)
    prefill(manager, "a", [1, 2, 3, 4, 5])  # 3 blocks, 2 full
    manager.free("a")
    manager.allocate("x", [9])  # 1 block, taken from the never-cached list
    # [1, 2, 3, 4, 6] reuses 2 cached blocks and needs 1 more: 3 free (2 of them the revived ones)
    assert manager.can_allocate([1, 2, 3, 4, 6])
    # [7, 8, 9, 10, 11] shares nothing and needs 3: 3 free, evicting both cached blocks
    assert manager.can_allocate([7, 8, 9, 10, 11])
    assert not manager.can_allocate([7, 8, 9, 10, 11, 12, 13])
    check(manager)


def test_it_takes_never_cached_blocks_before_evicting():
    manager = BlockManager(num_blocks=4, block_size=2)
    prefill(manager, "a", [1, 2, 3])  # block 0 cached, block 1 private
    manager.free("a")
    manager.allocate("b", [5, 6, 7])  # two blocks: the two never-cached ones
    assert manager.evictions == 0
    assert manager.cached_prefix([1, 2, 3]) == 2
    check(manager)


def test_it_evicts_the_least_recently_used_block_first_and_only_when_needed():
    manager = BlockManager(num_blocks=3, block_size=2)
    prefill(manager, "old", [1, 2, 0])
    manager.free("old")
    prefill(manager, "new", [3, 4, 0])
    manager.free("new")
    assert manager.num_cached_blocks == 2 and manager.evictions == 0
    manager.allocate("x", [9, 9, 9, 9])  # 2 blocks: 1 never-cached, then the LRU's oldest
    assert manager.evictions == 1
    assert manager.cached_prefix([1, 2, 0]) == 0
    assert manager.cached_prefix([3, 4, 0]) == 2
    check(manager)


def test_a_hit_refreshes_a_blocks_place_in_the_lru():
    manager = BlockManager(num_blocks=4, block_size=2)
    prefill(manager, "a", [1, 2, 0])
    manager.free("a")
    prefill(manager, "b", [3, 4, 0])
    manager.free("b")
    assert manager.allocate("c", [1, 2, 5]) == 2  # [1, 2] used again: now the most recent
    manager.free("c")
    manager.allocate("x", [9, 9, 9, 9, 9, 9])  # 3 blocks: 2 never-cached, then [3, 4] before [1, 2]
    manager.free("x")
    assert manager.cached_prefix([1, 2, 0]) == 2
    assert manager.cached_prefix([3, 4, 0]) == 0
    check(manager)


def test_a_freed_prefix_loses_its_tail_before_its_head():
    manager = BlockManager(num_blocks=4, block_size=2)
    prefill(manager, "a", [1, 2, 3, 4, 5, 6, 0])  # 3 cached blocks, 1 private
    manager.free("a")
    manager.allocate("x", [9, 9, 9])  # 2 blocks: the private one, then the LRU's oldest = the tail block
    assert manager.cached_prefix([1, 2, 3, 4, 5, 6, 0]) == 4
    check(manager)


def test_it_never_evicts_a_block_in_use():
    manager = BlockManager(num_blocks=3, block_size=2)
    prefill(manager, "a", [1, 2, 3, 4, 0])  # all three blocks held
    assert not manager.can_allocate([7])
    with pytest.raises(NoFreeBlocks):
        manager.allocate("b", [7])
    assert manager.cached_prefix([1, 2, 3, 4, 0]) == 4
    check(manager)


def test_a_block_computed_twice_at_once_is_cached_once():
    manager = BlockManager(num_blocks=8, block_size=2)
    manager.allocate("a", [1, 2, 3])
    manager.allocate("b", [1, 2, 4])  # same first block, before either computed it
    manager.mark_computed("a", 3)
    manager.mark_computed("b", 3)
    assert manager.num_cached_blocks == 1
    manager.free("a")
    manager.free("b")
    assert manager.num_cached_blocks == 1 and manager.num_free_blocks == 8
    assert manager.allocate("c", [1, 2, 5]) == 2
    check(manager)


def test_a_grown_sequence_caches_its_generated_blocks():
    manager = BlockManager(num_blocks=8, block_size=2)
    prefill(manager, "a", [1, 2, 3])
    manager.append_slot("a", 4)
    manager.mark_computed("a", 4)
    manager.append_slot("a", 5)
    manager.free("a")
    assert manager.allocate("b", [1, 2, 3, 4, 5]) == 4
    check(manager)


def test_it_marks_no_more_than_it_holds():
    manager = BlockManager(num_blocks=8, block_size=2)
    manager.allocate("a", [1, 2, 3])
    with pytest.raises(ValueError, match="holds 3 token slots"):
        manager.mark_computed("a", 4)


def test_without_prefix_caching_nothing_is_shared_or_counted():
    manager = BlockManager(num_blocks=8, block_size=2, enable_prefix_caching=False)
    prefill(manager, "a", [1, 2, 3, 4, 5])
    assert manager.allocate("b", [1, 2, 3, 4, 5]) == 0
    assert manager.num_cached_blocks == 0 and manager.queries == 0 and manager.hit_rate == 0.0
    manager.free("a")
    manager.free("b")
    assert manager.num_free_blocks == 8
    check(manager)


def test_resetting_the_prefix_cache_keeps_blocks_in_use():
    manager = BlockManager(num_blocks=8, block_size=2)
    prefill(manager, "a", [1, 2, 3])
    prefill(manager, "b", [4, 5, 6])
    manager.free("a")
    assert manager.reset_prefix_cache() == 1
    assert manager.cached_prefix([1, 2, 3]) == 0
    assert manager.cached_prefix([4, 5, 6]) == 2
    check(manager)


def test_ref_counts_balance_to_zero_after_a_random_workload():
    rng = random.Random(7)
    manager = BlockManager(num_blocks=32, block_size=4)
    prefixes = [[rng.randrange(50) for _ in range(rng.randrange(1, 14))] for _ in range(4)]
    live: list[int] = []
    for step in range(400):
        action = rng.random()
        if action < 0.4 or not live:
            prompt = rng.choice(prefixes) + [rng.randrange(50) for _ in range(rng.randrange(1, 9))]
            if manager.can_allocate(prompt):
                manager.allocate(step, prompt)
                manager.mark_computed(step, rng.randrange(len(prompt) + 1))
                live.append(step)
        elif action < 0.8:
            seq_id = rng.choice(live)
            if manager.can_append_slot(seq_id):
                manager.mark_computed(seq_id, manager.num_tokens(seq_id))
                manager.append_slot(seq_id, rng.randrange(50))
        else:
            manager.free(live.pop(rng.randrange(len(live))))
        check(manager)
    for seq_id in live:
        manager.free(seq_id)
    check(manager)
    assert all(block.ref_count == 0 for block in manager.blocks)
    assert manager.num_free_blocks == 32 and manager.usage == 0
    assert manager.hits > 0 and manager.evictions > 0

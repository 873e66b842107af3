"""The paged KV cache's block manager: which fixed-size blocks each sequence holds, shared prefixes, eviction.

Rules (vLLM's design, Infera's own code):
- The cache is a pool of `num_blocks` blocks of `block_size` token slots each. A sequence holds a block table (the
  ids of its blocks, in token order); token i sits in block `table[i // block_size]`, slot `i % block_size`.
- `allocate` reserves blocks for a whole prompt at admission (`can_allocate` says whether the free blocks suffice);
  `append_slot` reserves one more slot as a sequence grows (a new block only when its last one is full); `free`
  returns a finished, aborted or preempted sequence's blocks at once.
- Automatic prefix caching: once every slot of a block is computed (`mark_computed`), the block is keyed by a
  chained hash of its tokens, the key of the block before it and an optional extra key (the caller and cache salt
  that may share it: another key never matches), and a later prompt that starts with the same tokens and has the
  same extra key shares it instead of computing it again. The hash is SHA-256: a collision
  would hand one request another request's KV (a wrong answer and a leak across users), so Python's 64-bit `hash`
  will not do. A prompt is matched block by block up to its last token, which is always computed again (its logits
  give the first sampled token), so `allocate` reports `cached_tokens` as a multiple of `block_size`.
- A shared block is counted by reference; when its last user frees it, it stays cached, evictable, in an LRU.
  A block that is needed comes from the never-cached free list first, then from the LRU's oldest end (counted as an
  eviction). A block with users is never evicted. The last, partial block of a sequence is never cached nor shared,
  so a sequence only ever writes into blocks it alone holds (no copy-on-write needed). When two sequences compute
  the same block at once, the first one marked is cached; the other stays private and is freed as such.
- Freeing a sequence releases its blocks tail first, so a cached prefix's later blocks are evicted before its head.

Counters: `usage` (blocks held / total), `queries` and `hits` in prompt tokens (`hit_rate`), `evictions`.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from engine.errors import InvalidArgument


class NoFreeBlocks(RuntimeError):
    """The pool cannot give the blocks asked for (the caller should have asked `can_allocate`/`can_append_slot`)."""

    def __init__(self, needed: int, free: int) -> None:
        super().__init__(f"the KV cache needs {needed} free block(s) and has {free}")
        self.needed = needed
        self.free = free


def block_hash(parent: bytes | None, tokens: Sequence[int], extra_key: Hashable = None) -> bytes:
    """The key of a full block: SHA-256 over the parent block's key, the block's tokens and the extra key."""
    digest = hashlib.sha256()
    digest.update(parent or b"\0" * 32)
    digest.update(b"," + ",".join(str(int(t)) for t in tokens).encode())
    if extra_key is not None:
        digest.update(b"|" + repr(extra_key).encode())
    return digest.digest()


@dataclass(slots=True, eq=False)
class Block:
    """One physical block: its users and, once full and cached, its key."""

    block_id: int
    ref_count: int = 0
    key: bytes | None = None


@dataclass(slots=True, eq=False)
class _SequenceBlocks:
    """What the manager knows of one sequence: its tokens so far, its table, how much of it is computed."""

    tokens: list[int]
    extra_key: Hashable
    table: list[int] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)  # keys of its leading full blocks, computed so far
    computed: int = 0


class BlockManager:
    """Hands out KV-cache blocks to sequences, shares full prefix blocks and evicts cached ones LRU-first."""

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True) -> None:
        if num_blocks < 1:
            raise InvalidArgument(f"the KV cache needs at least 1 block, got num_blocks={num_blocks}")
        if block_size < 1:
            raise InvalidArgument(f"a KV-cache block holds at least 1 token, got block_size={block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free: deque[int] = deque(range(num_blocks))  # never cached (or evicted): taken first
        self._evictable: OrderedDict[int, None] = OrderedDict()  # cached, no users: oldest first
        self._cached: dict[bytes, int] = {}  # key -> block id
        self._seqs: dict[Hashable, _SequenceBlocks] = {}
        self.queries = 0  # prompt tokens looked up in the prefix cache
        self.hits = 0  # of those, tokens found cached
        self.evictions = 0

    # --- what the pool holds ---------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks no sequence holds (never cached, or cached and evictable)."""
        return len(self._free) + len(self._evictable)

    @property
    def num_cached_blocks(self) -> int:
        return len(self._cached)

    @property
    def usage(self) -> float:
        """The share of blocks held by sequences (0.0 to 1.0)."""
        return (self.num_blocks - self.num_free_blocks) / self.num_blocks

    @property
    def hit_rate(self) -> float:
        """Prompt tokens found in the prefix cache over prompt tokens looked up (0.0 before any lookup)."""
        return self.hits / self.queries if self.queries else 0.0

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks that hold `num_tokens` tokens."""
        return -(-num_tokens // self.block_size)

    def block_table(self, seq_id: Hashable) -> list[int]:
        """The sequence's block ids in token order (a copy)."""
        return list(self._seqs[seq_id].table)

    def num_tokens(self, seq_id: Hashable) -> int:
        """Token slots the sequence holds."""
        return len(self._seqs[seq_id].tokens)

    def __contains__(self, seq_id: Hashable) -> bool:
        return seq_id in self._seqs

    # --- prefix matching -------------------------------------------------------------------------------------
    def _match(self, tokens: Sequence[int], extra_key: Hashable) -> tuple[list[int], list[bytes]]:
        """Cached blocks (and their keys) that begin `tokens`, stopping before its last token's block."""
        if not self.enable_prefix_caching:
            return [], []
        found: list[int] = []
        keys: list[bytes] = []
        parent: bytes | None = None
        size = self.block_size
        for start in range(0, len(tokens) - 1 - size + 1, size):  # full blocks within tokens[:-1]
            key = block_hash(parent, tokens[start : start + size], extra_key)
            block_id = self._cached.get(key)
            if block_id is None:
                break
            found.append(block_id)
            keys.append(key)
            parent = key
        return found, keys

    def cached_prefix(self, tokens: Sequence[int], extra_key: Hashable = None) -> int:
        """How many of `tokens` a sequence allocated now would find cached (counts nothing)."""
        return len(self._match(tokens, extra_key)[0]) * self.block_size

    def can_allocate(self, tokens: Sequence[int], extra_key: Hashable = None, reserve: int = 0) -> bool:
        """Whether `allocate` would succeed now, keeping `reserve` blocks free."""
        hits, _ = self._match(tokens, extra_key)
        return self._shortfall(len(tokens), hits) + reserve <= 0

    def _shortfall(self, num_tokens: int, hits: list[int]) -> int:
        """New blocks a prompt needs beyond those free, once its cached blocks are held (<= 0: it fits)."""
        revived = sum(1 for b in hits if self.blocks[b].ref_count == 0)  # evictable now, held after
        return self.blocks_for(num_tokens) - len(hits) - (self.num_free_blocks - revived)

    # --- a sequence's life -----------------------------------------------------------------------------------
    def allocate(self, seq_id: Hashable, tokens: Sequence[int], extra_key: Hashable = None) -> int:
        """Reserve blocks for a prompt, sharing its cached prefix; returns the tokens found cached."""
        if seq_id in self._seqs:
            raise ValueError(f"sequence {seq_id!r} already holds KV-cache blocks")
        if not tokens:
            raise InvalidArgument("a sequence needs at least one token to allocate KV-cache blocks")
        hits, keys = self._match(tokens, extra_key)
        if self._shortfall(len(tokens), hits) > 0:
            raise NoFreeBlocks(self.blocks_for(len(tokens)) - len(hits), self.num_free_blocks)
        for block_id in hits:
            self._hold(block_id)
        seq = _SequenceBlocks(list(tokens), extra_key, table=list(hits), keys=keys)
        seq.table.extend(self._take() for _ in range(self.blocks_for(len(tokens)) - len(hits)))
        seq.computed = len(hits) * self.block_size
        self._seqs[seq_id] = seq
        if self.enable_prefix_caching:
            self.queries += len(tokens)
            self.hits += seq.computed
        return seq.computed

    def can_append_slot(self, seq_id: Hashable) -> bool:
        """Whether one more token fits: room in the last block, or a free block to take."""
        seq = self._seqs[seq_id]
        return len(seq.tokens) % self.block_size != 0 or self.num_free_blocks > 0

    def append_slot(self, seq_id: Hashable, token: int) -> bool:
        """Reserve the slot of a new token; True when it took a new block."""
        seq = self._seqs[seq_id]
        grew = len(seq.tokens) % self.block_size == 0
        if grew:
            if not self.num_free_blocks:
                raise NoFreeBlocks(1, 0)
            seq.table.append(self._take())
        seq.tokens.append(int(token))
        return grew

    def mark_computed(self, seq_id: Hashable, num_computed: int) -> None:
        """Record that the first `num_computed` tokens' KV is written; full blocks among them become shareable."""
        seq = self._seqs[seq_id]
        if num_computed > len(seq.tokens):
            raise ValueError(f"sequence {seq_id!r} holds {len(seq.tokens)} token slots, not {num_computed}")
        seq.computed = max(seq.computed, num_computed)
        if not self.enable_prefix_caching:
            return
        size = self.block_size
        while (len(seq.keys) + 1) * size <= seq.computed:
            index = len(seq.keys)
            parent = seq.keys[-1] if seq.keys else None
            key = block_hash(parent, seq.tokens[index * size : (index + 1) * size], seq.extra_key)
            seq.keys.append(key)
            block = self.blocks[seq.table[index]]
            if block.key is None and key not in self._cached:
                block.key = key
                self._cached[key] = block.block_id

    def free(self, seq_id: Hashable) -> int:
        """Release every block of a sequence (finished, aborted, preempted); returns how many it held."""
        seq = self._seqs.pop(seq_id, None)
        if seq is None:
            return 0
        for block_id in reversed(seq.table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                if block.key is not None:
                    self._evictable[block_id] = None  # most recently used end
                else:
                    self._free.append(block_id)
        return len(seq.table)

    def reset_prefix_cache(self) -> int:
        """Forget every evictable cached block (blocks in use stay cached); returns how many were dropped."""
        dropped = 0
        while self._evictable:
            block_id, _ = self._evictable.popitem(last=False)
            self._uncache(block_id)
            self._free.append(block_id)
            dropped += 1
        return dropped

    # --- blocks ----------------------------------------------------------------------------------------------
    def _hold(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.ref_count == 0:
            self._evictable.pop(block_id, None)
        block.ref_count += 1

    def _take(self) -> int:
        """A block for a new user: a never-cached one, else the least recently used cached one (an eviction)."""
        if self._free:
            block_id = self._free.popleft()
        elif self._evictable:
            block_id, _ = self._evictable.popitem(last=False)
            self._uncache(block_id)
            self.evictions += 1
        else:
            raise NoFreeBlocks(1, 0)
        self.blocks[block_id].ref_count = 1
        return block_id

    def _uncache(self, block_id: int) -> None:
        block = self.blocks[block_id]
        if block.key is not None and self._cached.get(block.key) == block_id:
            del self._cached[block.key]
        block.key = None

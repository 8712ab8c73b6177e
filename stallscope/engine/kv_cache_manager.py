"""Block bookkeeping for the paged KV cache with automatic prefix caching, as vLLM V1 keeps it.

    pool:         [null][b1][b2][b3][b4][b5][b6][b7]   num_gpu_blocks, block_size tokens each; block 0 is
                                                       the null block, never handed out (vLLM's block_pool.py)
    req A table:  [b3, b1, b6]   tokens 0..15 -> b3, 16..31 -> b1, 32..(num_tokens-1) -> b6 (partly filled)
    req B table:  [b3, b5]       b3 shared with A (ref_cnt 2): B's first 16 tokens equal A's
    free queue:   b2 b4 b7                             (least recently freed first; evicted from the front)

Each full block is named by a hash chain: sha256(parent block's hash + this block's token ids), so a
hash names the whole prefix up to the block's end. `get_computed_blocks(request)` returns the longest
run of leading blocks whose hashes are cached, capped at `num_tokens - 1` tokens so the last prompt
token is always computed (its logits pick the first output). `allocate_slots` takes those blocks
(ref_cnt + 1, out of the free queue if they sat there) and new ones from the front of the free queue;
a new block that still carries a hash is evicted from the cache first. `free(request)` drops the
references, tail first; a block at 0 goes to the back of the free queue but keeps its hash, so a later
request can still hit it until it is evicted (least recently used first). Cached free blocks count as
free (`usage`). Nothing here touches KV tensors or clocks, so a simulator can reuse it as is.
(vLLM 0.33.0: vllm/v1/core/kv_cache_manager.py, block_pool.py, kv_cache_utils.py.)
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict

from stallscope.engine.request import Request

NULL_BLOCK = 0


class KVCacheManager:
    """Example: `m = KVCacheManager(num_blocks=9, block_size=16); m.allocate_slots(req, 40)` takes 3 blocks."""

    def __init__(self, num_blocks: int, block_size: int, bytes_per_block: int = 0, enable_caching: bool = False):
        self.num_gpu_blocks = num_blocks
        self.block_size = block_size
        self.bytes_per_block = bytes_per_block
        self.bytes_per_token = bytes_per_block // block_size if block_size else 0
        self.enable_caching = enable_caching
        self.ref_cnt = [0] * num_blocks
        self.free_block_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks))
        self.block_tables: dict[str, list[int]] = {}
        self.block_hash: list[bytes | None] = [None] * num_blocks
        self.cached_block_hash_to_block: dict[bytes, int] = {}

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_queue)

    @property
    def num_used_blocks(self) -> int:
        """Blocks some request references (the null block excluded)."""
        return max(self.num_gpu_blocks - 1, 0) - len(self.free_block_queue)

    @property
    def usage(self) -> float:
        """vLLM's `kv_cache_usage_perc`: 1 - free / (num_gpu_blocks - 1), cached free blocks counted as free."""
        total = self.num_gpu_blocks - 1
        return 1.0 - len(self.free_block_queue) / total if total > 0 else 0.0

    def blocks_for_tokens(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def get_block_table(self, request_id: str) -> list[int]:
        return self.block_tables.get(request_id, [])

    def block_hashes(self, request: Request) -> list[bytes]:
        """The hash chain of the request's full blocks, extended as its tokens grow."""
        hashes, bs = request.block_hashes, self.block_size
        while (len(hashes) + 1) * bs <= request.num_tokens:
            start = len(hashes) * bs
            parent = hashes[-1] if hashes else b""
            tokens = array("q", request.all_token_ids[start:start + bs]).tobytes()
            hashes.append(hashlib.sha256(parent + tokens).digest())
        return hashes

    def get_computed_blocks(self, request: Request) -> tuple[list[int], int]:
        """(leading cached blocks, their token count) for a request about to be admitted; ([], 0) when off."""
        if not self.enable_caching:
            return [], 0
        max_blocks = (request.num_tokens - 1) // self.block_size
        blocks = []
        for block_hash in self.block_hashes(request)[:max_blocks]:
            block = self.cached_block_hash_to_block.get(block_hash)
            if block is None:
                break
            blocks.append(block)
        return blocks, len(blocks) * self.block_size

    def num_new_blocks_needed(self, request: Request, num_new_tokens: int, num_computed_blocks: int = 0) -> int:
        held = len(self.block_tables.get(request.request_id, ())) + num_computed_blocks
        total = request.num_computed_tokens + num_computed_blocks * self.block_size + num_new_tokens
        return max(0, self.blocks_for_tokens(total) - held)

    def allocate_slots(self, request: Request, num_new_tokens: int, new_computed_blocks: list[int] = (),
                       full_sequence_must_fit: bool = False) -> bool:
        """Cover the request's next `num_new_tokens` tokens (after `new_computed_blocks`, the cache hits
        `get_computed_blocks` found) with blocks; False (and no change) if the pool is short. With
        `full_sequence_must_fit` (vLLM 0.33's admission check) the pool must also hold all `num_tokens`
        of the request, though only the next `num_new_tokens` get blocks now."""
        evictable_hits = sum(1 for b in new_computed_blocks if self.ref_cnt[b] == 0)
        free = len(self.free_block_queue) - evictable_hits
        if full_sequence_must_fit:
            rest = request.num_tokens - request.num_computed_tokens - len(new_computed_blocks) * self.block_size
            if self.num_new_blocks_needed(request, rest, len(new_computed_blocks)) > free:
                return False
        need = self.num_new_blocks_needed(request, num_new_tokens, len(new_computed_blocks))
        if need > free:
            return False
        table = self.block_tables.setdefault(request.request_id, [])
        for block in new_computed_blocks:
            if self.ref_cnt[block] == 0:
                del self.free_block_queue[block]
            self.ref_cnt[block] += 1
            table.append(block)
        for _ in range(need):
            block, _ = self.free_block_queue.popitem(last=False)
            assert self.ref_cnt[block] == 0, f"block {block} in the free queue has ref_cnt {self.ref_cnt[block]}"
            self._evict(block)
            self.ref_cnt[block] = 1
            table.append(block)
        if self.enable_caching:
            num_cached = request.num_computed_tokens + len(new_computed_blocks) * self.block_size + num_new_tokens
            self._cache_full_blocks(request, table, min(num_cached, request.num_tokens))
        return True

    def _cache_full_blocks(self, request: Request, table: list[int], num_tokens: int) -> None:
        """Name every full block of the first `num_tokens` tokens by its hash (their KV is computed this step)."""
        hashes = self.block_hashes(request)
        for i in range(min(num_tokens // self.block_size, len(hashes))):
            block = table[i]
            if self.block_hash[block] is None and hashes[i] not in self.cached_block_hash_to_block:
                self.block_hash[block] = hashes[i]
                self.cached_block_hash_to_block[hashes[i]] = block

    def _evict(self, block: int) -> None:
        block_hash = self.block_hash[block]
        if block_hash is not None:
            self.block_hash[block] = None
            if self.cached_block_hash_to_block.get(block_hash) == block:
                del self.cached_block_hash_to_block[block_hash]

    def free(self, request: Request | str) -> None:
        """Release every block the request holds, tail first; unknown requests are a no-op."""
        request_id = request if isinstance(request, str) else request.request_id
        for block in reversed(self.block_tables.pop(request_id, [])):
            self.ref_cnt[block] -= 1
            assert self.ref_cnt[block] >= 0, f"block {block} freed twice"
            if self.ref_cnt[block] == 0:
                self.free_block_queue[block] = None

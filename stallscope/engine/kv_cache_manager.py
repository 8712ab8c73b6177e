"""Block bookkeeping for the paged KV cache: a fixed pool, one block table per request.

    pool:         [b0][b1][b2][b3][b4][b5][b6][b7]     num_gpu_blocks, block_size tokens each
    req A table:  [b3, b0, b6]   tokens 0..15 -> b3, 16..31 -> b0, 32..(num_tokens-1) -> b6 (partly filled)
    req B table:  [b5]
    free queue:   b1 b2 b4 b7                          (least recently freed first)

`allocate_slots(request, num_new_tokens)` grows a table to cover `num_computed_tokens + num_new_tokens`
tokens, taking whole blocks from the free queue on demand, or returns False without side effects when
the pool cannot cover it (the scheduler then preempts). Blocks are reference-counted; `free(request)`
drops the request's references and a block whose count reaches 0 returns to the free queue. Nothing
here touches KV tensors or clocks, so a simulator can reuse it as is.
"""

from __future__ import annotations

from collections import deque

from stallscope.engine.request import Request


class KVCacheManager:
    """Example: `m = KVCacheManager(num_blocks=8, block_size=16); m.allocate_slots(req, 40)` takes 3 blocks."""

    def __init__(self, num_blocks: int, block_size: int, bytes_per_block: int = 0):
        self.num_gpu_blocks = num_blocks
        self.block_size = block_size
        self.bytes_per_block = bytes_per_block
        self.bytes_per_token = bytes_per_block // block_size if block_size else 0
        self.ref_cnt = [0] * num_blocks
        self.free_block_queue: deque[int] = deque(range(num_blocks))
        self.block_tables: dict[str, list[int]] = {}

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_queue)

    @property
    def num_used_blocks(self) -> int:
        return self.num_gpu_blocks - len(self.free_block_queue)

    @property
    def usage(self) -> float:
        """Fraction of blocks in use, 0..1 (vLLM's `kv_cache_usage_perc`)."""
        return self.num_used_blocks / self.num_gpu_blocks if self.num_gpu_blocks else 0.0

    def blocks_for_tokens(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def get_block_table(self, request_id: str) -> list[int]:
        return self.block_tables.get(request_id, [])

    def num_new_blocks_needed(self, request: Request, num_new_tokens: int) -> int:
        held = len(self.block_tables.get(request.request_id, ()))
        return max(0, self.blocks_for_tokens(request.num_computed_tokens + num_new_tokens) - held)

    def allocate_slots(self, request: Request, num_new_tokens: int) -> bool:
        """Cover the request's next `num_new_tokens` tokens with blocks; False (and no change) if the pool is short."""
        need = self.num_new_blocks_needed(request, num_new_tokens)
        if need > len(self.free_block_queue):
            return False
        table = self.block_tables.setdefault(request.request_id, [])
        for _ in range(need):
            block = self.free_block_queue.popleft()
            assert self.ref_cnt[block] == 0, f"block {block} in the free queue has ref_cnt {self.ref_cnt[block]}"
            self.ref_cnt[block] = 1
            table.append(block)
        return True

    def free(self, request: Request | str) -> None:
        """Release every block the request holds; unknown requests are a no-op."""
        request_id = request if isinstance(request, str) else request.request_id
        for block in reversed(self.block_tables.pop(request_id, [])):
            self.ref_cnt[block] -= 1
            assert self.ref_cnt[block] >= 0, f"block {block} freed twice"
            if self.ref_cnt[block] == 0:
                self.free_block_queue.append(block)

"""Variant `static_grid` (paper section 4.7): a launch grid that does not depend on the batch.

A CUDA/HIP graph replays fixed launch arguments. For one graph, captured once with dummy
maximum-size metadata, to serve batches of any composition (decodes, prefills, mixed;
padding tokens past cu_seqlens_q[-1] and empty sequences included), nothing the host
plans may depend on the metadata's values. So the grid is a fixed number of persistent
programs, about `programs_per_sm` per SM / CU, each looping over work items (Q-block,
KV head, segment), heaviest first so the programs finish together; the number of
Q-blocks is read on the device; segment buffers are kept per shape
(`release_buffers()` drops them). The reduction of split decodes is persistent the same
way, over (sequence, query head) items.

The kernels are parallel's (`common.q_block_kernel` with PERSISTENT on); the
configuration comes from the per-vendor trees of `heuristics`, chosen at plan time from
shapes and host-side hints. A graph keeps the configuration it was captured with: correct
for any batch, fastest for batches like the one it was captured for.
"""

from __future__ import annotations

from kernels.launch import KernelLaunch
from kernels.paged_attention import heuristics, planning

FEATURES = planning.FEATURES
release_buffers = planning.release_buffers


def plan(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, *, out,
         **options) -> list[KernelLaunch]:
    return planning.plan_q_blocks(q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens,
                                  out=out, choose=heuristics.choose, persistent=True, **options)

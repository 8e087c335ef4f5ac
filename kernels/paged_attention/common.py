"""Device helpers every variant shares: sequence lookup and soft-capping.

Kept interpreter-compatible (TRITON_INTERPRET=1): scalar while-loops with loaded bounds,
no inline assembly, no libdevice calls.
"""

from __future__ import annotations

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)  # scores are scaled by log2(e) so the kernels can use exp2


@triton.jit
def find_seq_idx(cu_seqlens_q_ptr, target, num_seqs, BLOCK_Q: tl.constexpr,
                 Q_BLOCK_MODE: tl.constexpr):
    """Index of the sequence holding `target` (a token, or a Q-block in Q_BLOCK_MODE).

    Binary search over cu_seqlens_q. In Q_BLOCK_MODE sequence i's first Q-block is
    cu_seqlens_q[i] // BLOCK_Q + i, an upper bound on the blocks before it that needs no
    extra metadata; programs that land in the gaps find no queries and exit.
    """
    lo = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        start = tl.load(cu_seqlens_q_ptr + mid)
        if Q_BLOCK_MODE:
            start = start // BLOCK_Q + mid
        if start <= target:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@triton.jit
def apply_softcap(s, cap):
    """cap * tanh(s / cap), written as 1 - 2 / (exp(2x) + 1) so that large |x| saturates."""
    return cap * (1.0 - 2.0 / (tl.exp(2.0 * s / cap) + 1.0))


def next_pow2(n: int) -> int:
    return triton.next_power_of_2(n)


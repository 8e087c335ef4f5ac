"""perf/lab/gather_ceiling.py's reader in Triton's interpreter: it reads every K and V byte of
each (sequence, KV head) a decode reads, paged through the block table and from contiguous
buffers alike (the sums equal torch's over the same keys), so its time is the time of those bytes."""

from __future__ import annotations

import pytest
import torch
from interpreter_support import needs_interpreter

from kernels.batch import BatchSpec, build_batch
from perf.lab.gather_ceiling import _ints, read_kv_kernel


@needs_interpreter
@pytest.mark.parametrize("paged", [True, False])
def test_the_reader_sums_every_key_each_sequence_holds(paged):
    spec = BatchSpec((1, 1, 1), (37, 100, 5), num_q_heads=8, num_kv_heads=2, head_size=64, block_size=16,
                     fp8_kv=True)
    b = build_batch(spec, "cpu")
    k, v = _ints(b.k_cache), _ints(b.v_cache)
    bs, heads, head = k.shape[1], k.shape[2], k.shape[3]
    longest = max(spec.kv_lens)
    dense_k = torch.zeros(3, heads, longest, head, dtype=k.dtype)
    dense_v = torch.zeros_like(dense_k)
    expected = []
    for s, n in enumerate(spec.kv_lens):
        pos = torch.arange(n)
        blocks = b.block_table[s, pos // bs].long()
        for h in range(heads):
            dense_k[s, h, :n], dense_v[s, h, :n] = k[blocks, pos % bs, h], v[blocks, pos % bs, h]
            expected.append(int(dense_k[s, h].long().sum() + dense_v[s, h].long().sum()))
    sums = torch.full((3 * heads,), -1, dtype=torch.int32)
    if paged:
        caches, strides = (k, v), (k.stride(0), k.stride(1), k.stride(2), b.block_table.stride(0))
    else:
        caches, strides = (dense_k, dense_v), (longest * head, 0, 0, 0)
    read_kv_kernel[(3 * heads,)](*caches, b.block_table, b.seq_lens, sums, *strides, heads, BLOCK_SIZE=bs,
                                 TILE=32, HEAD=head, PAGED=paged)
    assert sums.tolist() == expected and min(expected) > 0

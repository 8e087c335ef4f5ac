"""perf/lab/gather_ceiling.py's reader in Triton's interpreter: it reads every K and V byte of
each (sequence, KV head) a decode reads, paged through the block table and from contiguous
buffers alike, whole or in segments (the XOR of its segments' words is NumPy's over the same keys'
words, and a segment past an item's last key reads nothing), so its time is the time of those bytes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from interpreter_support import needs_interpreter

from kernels.batch import BatchSpec, build_batch
from perf import lab
from perf.errors import ConfigError
from perf.lab.gather_ceiling import main, read_kv_kernel, segment_keys, words


@needs_interpreter
@pytest.mark.parametrize("paged", [True, False])
@pytest.mark.parametrize("segments", [1, 3])
def test_the_reader_takes_every_word_each_sequence_holds(paged, segments):
    spec = BatchSpec((1, 1, 1), (37, 100, 5), num_q_heads=8, num_kv_heads=2, head_size=64, block_size=16,
                     fp8_kv=True)
    b = build_batch(spec, "cpu")
    k, v = words(b.k_cache), words(b.v_cache)
    bs, heads, row_words = k.shape[1], k.shape[2], k.shape[3]
    longest = max(spec.kv_lens)
    dense_k = torch.zeros(3, heads, longest, row_words, dtype=k.dtype)
    dense_v = torch.zeros_like(dense_k)
    expected = []
    for s, n in enumerate(spec.kv_lens):
        pos = torch.arange(n)
        blocks = b.block_table[s, pos // bs].long()
        for h in range(heads):
            dense_k[s, h, :n], dense_v[s, h, :n] = k[blocks, pos % bs, h], v[blocks, pos % bs, h]
            held = torch.cat([dense_k[s, h, :n].flatten(), dense_v[s, h, :n].flatten()])
            expected.append(int(np.bitwise_xor.reduce(held.numpy())))
    items = 3 * heads
    found = torch.full((segments * items,), -1, dtype=torch.int32)
    if paged:
        caches, strides = (k, v), (k.stride(0), k.stride(1), k.stride(2), b.block_table.stride(0))
    else:
        caches, strides = (dense_k, dense_v), (longest * row_words, 0, 0, 0)
    seg_keys = segment_keys(longest, segments, 16)  # 100 keys in 3 segments: 48, 48 and 4
    read_kv_kernel[(segments * items,)](*caches, b.block_table, b.seq_lens, found, *strides, heads, items,
                                        seg_keys, BLOCK_SIZE=bs, TILE=16, WORDS=row_words, PAGED=paged,
                                        STAGES=2)
    parts = found.view(segments, items).numpy()
    assert np.bitwise_xor.reduce(parts, axis=0).tolist() == expected and 0 not in expected
    for s, n in enumerate(spec.kv_lens):  # a segment that starts past the item's last key reads nothing
        for seg in range(segments):
            if seg * seg_keys >= n:
                assert parts[seg, s * heads:(s + 1) * heads].tolist() == [0] * heads


@pytest.mark.parametrize("bad", ["", "0", "1,,2", "2,2", "2,02", "x", "-4", "1.5"])
def test_a_grid_option_takes_distinct_positive_integers_only(bad):
    """Refused before anything needs a GPU: one line naming the option."""
    with pytest.raises(ConfigError, match="--tiles .*expected distinct tiles"):
        main(["--tiles", bad])
    assert lab.counts("32, 64", "--tiles", "tiles") == (32, 64)

"""One CUDA/HIP graph of the static-grid variant, replayed for batches of other compositions.

The graph is captured once, with dummy maximum-size metadata (every sequence as long as the
block table allows); each replay then gets new metadata values (decodes, prefills, mixed,
empty sequences, padding tokens past cu_seqlens_q[-1]) and new queries copied into the
captured tensors, and must match the fp32 reference. Two graphs: one planned for a
decode batch (KV segments and the reduction inside), one for a prefill batch.
On CPU the planning half still runs: the launches of two compositions must be identical.
"""

from __future__ import annotations

import pytest
import torch

from kernels import VARIANTS
from kernels.reference import paged_attention_reference

NUM_SEQS, NUM_TOKENS, MAX_BLOCKS, BLOCK_SIZE = 6, 96, 256, 16  # up to 4096 positions per sequence
NUM_Q_HEADS, NUM_KV_HEADS, HEAD_SIZE = 32, 8, 128
COMPOSITIONS = {  # name -> (query_lens, kv_lens); sums of query_lens <= NUM_TOKENS
    "decode": ((1, 1, 1, 1, 1, 1), (4096, 1, 3333, 17, 2500, 90)),
    "prefill": ((40, 16, 20, 10, 5, 5), (40, 400, 20, 4096, 5, 64)),
    "mixed": ((1, 70, 1, 2, 1, 21), (3000, 200, 1, 2, 777, 21)),
    "padded": ((1, 1, 0, 0, 1, 0), (300, 31, 0, 0, 4096, 0)),  # empty sequences, padding tokens
}


def _tensors(device, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    num_blocks = NUM_SEQS * MAX_BLOCKS + 7
    cache = (num_blocks, BLOCK_SIZE, NUM_KV_HEADS, HEAD_SIZE)
    return dict(
        q=torch.randn(NUM_TOKENS, NUM_Q_HEADS, HEAD_SIZE, generator=gen).to(dtype).to(device),
        k_cache=torch.randn(*cache, generator=gen).to(dtype).to(device),
        v_cache=torch.randn(*cache, generator=gen).to(dtype).to(device),
        block_table=torch.randperm(num_blocks, generator=gen)[:NUM_SEQS * MAX_BLOCKS]
        .reshape(NUM_SEQS, MAX_BLOCKS).to(torch.int32).to(device),
        cu_seqlens_q=torch.linspace(0, NUM_TOKENS, NUM_SEQS + 1).to(torch.int32).to(device),
        seq_lens=torch.full((NUM_SEQS,), MAX_BLOCKS * BLOCK_SIZE, dtype=torch.int32, device=device),
    )


def _set_composition(t, query_lens, kv_lens, seed):
    """Write a composition's metadata and fresh queries/table into the captured tensors."""
    gen = torch.Generator().manual_seed(seed)
    cu = torch.zeros(NUM_SEQS + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(query_lens), 0)
    t["cu_seqlens_q"].copy_(cu)
    t["seq_lens"].copy_(torch.tensor(kv_lens, dtype=torch.int32))
    table = torch.randperm(t["k_cache"].shape[0], generator=gen)[:NUM_SEQS * MAX_BLOCKS]
    t["block_table"].copy_(table.reshape(NUM_SEQS, MAX_BLOCKS).to(torch.int32))
    t["q"].copy_(torch.randn(t["q"].shape, generator=gen).to(t["q"].dtype))


def _args(t):
    return (t["q"], t["k_cache"], t["v_cache"], t["block_table"], t["cu_seqlens_q"], t["seq_lens"])


def _describe(value):
    """A tensor by its address (one-element stand-ins for absent options by shape only)."""
    if not isinstance(value, torch.Tensor):
        return value
    return (tuple(value.shape), value.dtype) + ((value.data_ptr(),) if value.numel() > 1 else ())


@pytest.mark.parametrize("planned_for", [dict(max_seqlen_q=1), dict(max_seqlen_q=NUM_TOKENS)],
                         ids=["decode-graph", "prefill-graph"])
def test_plan_is_independent_of_the_composition(planned_for):
    """Same shapes, different metadata values: identical grid, arguments and constants."""
    t = _tensors("cpu")
    out = torch.empty_like(t["q"])
    plans = []
    for query_lens, kv_lens in COMPOSITIONS.values():
        _set_composition(t, query_lens, kv_lens, seed=1)
        # check_values=False: padded compositions end before num_tokens, as in serving
        _, launches = VARIANTS["static_grid"].plan(
            *_args(t), out=out, max_seqlen_k=MAX_BLOCKS * BLOCK_SIZE, check_values=False,
            **planned_for)
        plans.append([(L.name, L.grid, L.constexprs, {k: _describe(v) for k, v in L.args.items()})
                      for L in launches])
    for p in plans[1:]:
        assert p == plans[0]
    if planned_for["max_seqlen_q"] == 1:
        assert len(plans[0]) == 2 and plans[0][0][3]["num_segments"] > 1  # split + reduction


@pytest.mark.gpu
@pytest.mark.parametrize("planned_for", [dict(max_seqlen_q=1), dict(max_seqlen_q=NUM_TOKENS)],
                         ids=["decode-graph", "prefill-graph"])
def test_one_graph_replays_every_composition(planned_for, device):
    t = _tensors(device)
    out = torch.full_like(t["q"], float("nan"))
    variant = VARIANTS["static_grid"]
    options = dict(scale=HEAD_SIZE ** -0.5, max_seqlen_k=MAX_BLOCKS * BLOCK_SIZE, **planned_for)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up: compiles, allocates the segment buffers
        variant(*_args(t), out=out, **options)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        variant(*_args(t), out=out, **options)

    for i, (name, (query_lens, kv_lens)) in enumerate(COMPOSITIONS.items()):
        _set_composition(t, query_lens, kv_lens, seed=100 + i)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        expected = paged_attention_reference(*_args(t), scale=options["scale"])
        used = int(sum(query_lens))  # rows past cu_seqlens_q[-1] are padding: never written
        torch.testing.assert_close(out[:used].float(), expected[:used].float(), atol=1.5e-2, rtol=1e-2,
                                   msg=lambda m, name=name: f"composition {name}: {m}")
        assert torch.isnan(out[used:]).all(), f"composition {name}: padding rows were written"

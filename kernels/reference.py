"""fp32 reference for the paged-attention contract: obviously correct, slow.

It reads the same paged cache as the kernels (through the block table), one sequence at a
time, and computes causal attention in float32 with plain torch operations. Semantics
every variant must match:

- the queries of a sequence are its last q_len positions: query i sits at absolute
  position kv_len - q_len + i and sees keys 0..that position (causal, chunked prefill);
- query head h reads KV head h // (num_q_heads // num_kv_heads) (GQA, MQA);
- sliding_window W keeps keys with position - key_position < W;
- softcap c maps each scaled score s to c * tanh(s / c) before masking;
- sinks[h] is one extra logit per query head that joins the softmax denominator only;
- fp8 caches (either format of `kernels.inputs.FP8_FORMATS`: OCP or FNUZ e4m3) are
  dequantized as value * k_scale (v_scale), torch decoding each format's bytes; the kernels
  refuse scales passed with caches in q's dtype, the reference (which checks nothing)
  ignores them;
- only the slots a sequence owns are read: its first seq_len positions through its block
  table (whatever the rest of the cache holds, NaN included, cannot reach the output), and
  under a sliding window only from the first key its first query sees: the blocks wholly
  before that may have been released (`kernels.batch.released_blocks`) and hold anything.
"""

from __future__ import annotations

import torch

from kernels.inputs import is_fp8


def paged_attention_reference(
    q, k_cache, v_cache, block_table, cu_seqlens_q, seq_lens, *,
    scale=None, sliding_window=None, softcap=None, sinks=None,
    k_scale=None, v_scale=None, out=None,
):
    """Same signature as every variant; returns `out` (allocated when not given)."""
    num_kv_heads, head_size = k_cache.shape[2], k_cache.shape[3]
    group = q.shape[1] // num_kv_heads
    block_size = k_cache.shape[1]
    scale = head_size ** -0.5 if scale is None else scale
    out = torch.empty_like(q) if out is None else out
    cu = cu_seqlens_q.tolist()
    for s, kv_len in enumerate(seq_lens.tolist()):
        q_start, q_end = cu[s], cu[s + 1]
        q_len = q_end - q_start
        first = 0  # the first key any query of the sequence sees
        if sliding_window is not None and sliding_window > 0:
            first = max(kv_len - q_len - sliding_window + 1, 0)
        positions = torch.arange(first, kv_len, device=q.device)
        physical = block_table[s, positions // block_size].long()
        k = k_cache[physical, positions % block_size].float()  # [kv_len, kv_heads, d]
        v = v_cache[physical, positions % block_size].float()
        if is_fp8(k_cache.dtype):
            k, v = k * k_scale.float(), v * v_scale.float()
        k = k.repeat_interleave(group, dim=1)  # [kv_len, q_heads, d]
        v = v.repeat_interleave(group, dim=1)
        qs = q[q_start:q_end].float()  # [q_len, q_heads, d]
        scores = torch.einsum("qhd,khd->hqk", qs, k) * scale
        if softcap is not None and softcap > 0:
            scores = softcap * torch.tanh(scores / softcap)
        q_pos = torch.arange(kv_len - q_len, kv_len, device=q.device)[:, None]
        visible = positions[None, :] <= q_pos
        if sliding_window is not None and sliding_window > 0:
            visible &= (q_pos - positions[None, :]) < sliding_window
        scores = scores.masked_fill(~visible, float("-inf"))
        if sinks is not None:
            sink = sinks.float()[:, None, None].expand(-1, q_len, 1)
            probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
        else:
            probs = torch.softmax(scores, dim=-1)
        out[q_start:q_end] = torch.einsum("hqk,khd->qhd", probs, v).to(out.dtype)
    return out

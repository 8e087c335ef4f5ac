"""Vendor-library peers without the libraries: the registry, `--peers`, flashinfer's decode or
prefill wrapper on the kernels' own cache, vLLM's refusal, and peers measured as cases of a side.

flashinfer and vLLM are stood in for by fake modules that record what they are given; the GPU
checks are patched so the setup code runs on CPU. The fakes compute nothing: these tests check
what the harness hands each library (the same tensors, the right wrapper and options), not
the libraries.
"""

from __future__ import annotations

import contextlib
import enum
import math
import sys
import types

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from perf import peers, results
from perf.errors import ConfigError
from perf.scenarios import Scenario


def _batch(name: str):
    from kernels.batch import build_batch

    return build_batch(Scenario.parse(name).spec(), "cpu")


# --- registry and --peers ----------------------------------------------------------------------


def test_every_vendor_peer_is_registered_with_a_label_and_a_package():
    for vendor, names in peers.VENDOR_PEERS.items():
        for name in names:
            p = peers.PEERS[name]
            assert p.label and p.module and callable(p.setup), (vendor, name)
    assert {"flashinfer_paged", "vllm_unified"} <= set(peers.VENDOR_PEERS["nvidia"])
    assert {n for n, p in peers.PEERS.items() if p.dense} == {"sdpa_cudnn", "sdpa_flash", "sdpa_efficient"}
    assert "not a registered peer" in peers.absent_reason("nope")


def test_resolve_auto_none_and_lists(monkeypatch):
    assert peers.resolve("none", "nvidia") == ((), {})
    assert peers.resolve("auto", None) == ((), {})  # no GPU: nothing to compare with
    present, absent = peers.resolve("auto", "nvidia")
    assert set(present) | set(absent) == set(peers.VENDOR_PEERS["nvidia"])
    assert "sdpa_cudnn" in present  # PyTorch is installed everywhere
    assert absent["vllm_unified"] == "vllm is not installed"  # not in CI's environment
    assert peers.resolve("sdpa_flash, vllm_unified", "amd") == (("sdpa_flash",), {
        "vllm_unified": "vllm is not installed"})
    with pytest.raises(ConfigError, match="--peers: unknown peer cudnn"):
        peers.resolve("cudnn", "nvidia")
    with pytest.raises(ConfigError, match="--peers"):
        peers.resolve(",", "nvidia")


# --- flashinfer on the kernels' cache ------------------------------------------------------------


class _Wrapper:
    calls: list = []

    def __init__(self, workspace, layout, **kw):
        self.init = (workspace, layout, kw)
        self.planned = None
        _Wrapper.calls.append(self)

    def plan(self, *args, **kw):
        if getattr(self, "refuse", False):
            raise ValueError("head_dim 128 with page size 16: unsupported")
        self.planned = (args, kw)

    def run(self, q, kv):
        self.ran = (q, kv)
        return torch.empty_like(q)


@pytest.fixture
def fake_flashinfer(monkeypatch):
    class Decode(_Wrapper):
        pass

    class Prefill(_Wrapper):
        pass

    mod = types.ModuleType("flashinfer")
    mod.BatchDecodeWithPagedKVCacheWrapper = Decode
    mod.BatchPrefillWithPagedKVCacheWrapper = Prefill
    _Wrapper.calls = []
    monkeypatch.setitem(sys.modules, "flashinfer", mod)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the peer's "needs a GPU" check
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    return mod


def _flashinfer(name):
    batch = _batch(name)
    fn, label, note = peers.setup_for_batch("flashinfer_paged", batch.spec, "cpu", batch)
    (wrapper,) = _Wrapper.calls
    return batch, fn, note, wrapper


def test_flashinfer_decode_batch_uses_the_decode_wrapper_on_the_same_cache(fake_flashinfer):
    batch, fn, note, w = _flashinfer("llama3-8b/decode/batch3-kv40-var/block16")
    assert isinstance(w, fake_flashinfer.BatchDecodeWithPagedKVCacheWrapper)
    assert w.init[1] == "NHD" and w.init[2] == {"use_tensor_cores": True}  # GQA 4:1
    args, kw = w.planned
    indptr, indices, last, *heads = args
    spec = batch.spec
    blocks = spec.blocks_per_seq()
    assert indptr.tolist() == [0, *torch.tensor(blocks).cumsum(0).tolist()]
    assert indices.tolist() == [b for i, n in enumerate(blocks) for b in batch.block_table[i, :n].tolist()]
    assert last.tolist() == [kv - (n - 1) * 16 for kv, n in zip(spec.kv_lens, blocks)]
    assert heads == [32, 8, 128, 16]
    assert kw["window_left"] == -1 and kw["logits_soft_cap"] is None
    assert kw["sm_scale"] == batch.options["scale"]
    assert kw["q_data_type"] == kw["kv_data_type"] == torch.float16
    assert "tensor cores" in note and "in place" in note
    fn()  # the timed call: the kernels' own tensors, no copy
    q, (k, v) = w.ran
    assert q is batch.q and k is batch.k_cache and v is batch.v_cache


def test_flashinfer_without_grouped_heads_decodes_on_cuda_cores(fake_flashinfer):
    _, _, note, w = _flashinfer("llama2-7b/decode/batch2-kv32/block16")  # MHA: 1 query head per KV head
    assert w.init[2] == {"use_tensor_cores": False} and "tensor cores" not in note


@pytest.mark.parametrize("name", ["llama3-8b/mixed50/batch4-kv48/block16",
                                  "llama3-8b/prefill/batch2-kv32/block16"])
def test_flashinfer_other_batches_use_the_causal_prefill_wrapper(fake_flashinfer, name):
    batch, _, note, w = _flashinfer(name)
    assert isinstance(w, fake_flashinfer.BatchPrefillWithPagedKVCacheWrapper) and w.init[1] == "NHD"
    args, kw = w.planned
    assert args[0] is batch.cu_seqlens_q and kw["causal"] is True and "causal" in note


def test_flashinfer_window_and_softcap_are_passed_on(fake_flashinfer):
    _, _, _, w = _flashinfer("gemma2-9b/mixed50/batch2-kv64/block16/window16/softcap50")
    kw = w.planned[1]
    assert kw["window_left"] == 15  # kernels.batch: a query sees `window` keys, itself included
    assert kw["logits_soft_cap"] == 50.0


@pytest.mark.parametrize("feature, why", [("fp8", "fp8 KV cache"), ("sinks", "sinks")])
def test_flashinfer_refuses_what_it_is_not_given_here(fake_flashinfer, feature, why):
    batch = _batch(f"llama3-8b/decode/batch2-kv32/block16/{feature}")
    with pytest.raises(peers.PeerUnavailable, match=f"flashinfer has no {why} \\("):
        peers.setup_for_batch("flashinfer_paged", batch.spec, "cpu", batch)


def test_flashinfer_refusing_a_plan_is_a_note(fake_flashinfer, monkeypatch):
    monkeypatch.setattr(_Wrapper, "refuse", True, raising=False)
    batch = _batch("llama3-8b/decode/batch2-kv32/block16")
    with pytest.raises(peers.PeerUnavailable, match="flashinfer refused: head_dim 128"):
        peers.setup_for_batch("flashinfer_paged", batch.spec, "cpu", batch)


# --- vLLM's Triton unified attention ------------------------------------------------------------


def test_vllm_is_a_note_where_it_is_absent_or_broken(monkeypatch):
    spec = Scenario.parse("llama3-8b/decode/batch2-kv32/block16").spec()
    with pytest.raises(peers.PeerUnavailable, match="vllm is not installed"):
        peers.setup_for_batch("vllm_unified", spec, "cpu")
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))  # imports, without the kernel
    with pytest.raises(peers.PeerUnavailable, match="Triton unified attention does not import"):
        peers.setup_for_batch("vllm_unified", spec, "cpu")


def test_vllm_reads_the_kernels_batch(monkeypatch):
    seen = {}

    def unified_attention(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k, softmax_scale,
                          causal, window_size, block_table, softcap, q_descale, k_descale, v_descale,
                          alibi_slopes=None, sinks=None):
        seen.update(locals())

    mod = types.ModuleType("vllm.v1.attention.ops.triton_unified_attention")
    mod.unified_attention = unified_attention
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    batch = _batch("gpt-oss-20b/mixed50/batch2-kv64/block16/window16/sinks")
    fn, _, note = peers.setup_for_batch("vllm_unified", batch.spec, "cpu", batch)
    assert seen["k"] is batch.k_cache and seen["block_table"] is batch.block_table and seen["causal"]
    assert seen["window_size"] == (15, 0) and seen["sinks"] is batch.options["sinks"]
    assert seen["max_seqlen_k"] == 64 and seen["k_descale"] is None and "in place" in note


def _fake_vllm(monkeypatch, unified_attention, quant_modes=True):
    mod = types.ModuleType("vllm.v1.attention.ops.triton_unified_attention")
    mod.unified_attention = unified_attention
    if quant_modes:  # 0.2x on: the module imports vllm.v1.kv_cache_interface.KVQuantMode
        mod.KVQuantMode = enum.IntEnum("KVQuantMode", [("NONE", 0), ("FP8_PER_TENSOR", 1)])
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    return mod


def _vllm_0_33(seen):
    """vLLM 0.33's signature (vllm/v1/attention/ops/triton_unified_attention.py)."""
    def unified_attention(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k, softmax_scale,
                          causal, window_size, block_table, softcap, q_descale, k_descale, v_descale,
                          seq_threshold_3D=None, num_par_softmax_segments=None, softmax_segm_output=None,
                          softmax_segm_max=None, softmax_segm_expsum=None, alibi_slopes=None,
                          output_scale=None, qq_bias=None, sinks=None, mm_prefix_range=None,
                          use_alibi_sqrt=False, kv_quant_mode=0, k_scale_cache=None, v_scale_cache=None):
        seen.update(locals())
    return unified_attention


def _vllm_0_19(seen):
    def unified_attention(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k, softmax_scale,
                          causal, window_size, block_table, softcap, q_descale, k_descale, v_descale,
                          seq_threshold_3D=None, num_par_softmax_segments=None, softmax_segm_output=None,
                          softmax_segm_max=None, softmax_segm_expsum=None, alibi_slopes=None,
                          output_scale=None, qq_bias=None, sinks=None):
        seen.update(locals())
    return unified_attention


def test_vllm_0_33_is_told_an_fp8_cache_has_per_tensor_scales(monkeypatch):
    seen = {}
    mod = _fake_vllm(monkeypatch, _vllm_0_33(seen))
    batch = _batch("llama3-8b/prefill/batch2-kv32/block16/fp8")
    _, _, note = peers.setup_for_batch("vllm_unified", batch.spec, "cpu", batch)
    assert seen["kv_quant_mode"] == mod.KVQuantMode.FP8_PER_TENSOR == peers.VLLM_FP8_PER_TENSOR
    assert float(seen["k_descale"].flatten()[0]) == float(batch.options["k_scale"])
    assert float(seen["v_descale"].flatten()[0]) == float(batch.options["v_scale"])
    assert "FP8_PER_TENSOR" in note and "vllm version unknown" in note  # a stand-in: no metadata
    seen.clear()
    bf16 = _batch("llama3-8b/decode/batch2-kv32-q4/block16/bf16")  # no fp8: vLLM's default mode
    _, _, note = peers.setup_for_batch("vllm_unified", bf16.spec, "cpu", bf16)
    assert seen["kv_quant_mode"] == 0 and seen["k_descale"] is None and "FP8" not in note
    assert seen["max_seqlen_q"] == 4 and seen["seq_threshold_3D"] == 128 // 8  # vLLM picks 2D or 3D


def test_vllm_0_19_scales_an_fp8_cache_without_being_told(monkeypatch):
    seen = {}
    _fake_vllm(monkeypatch, _vllm_0_19(seen), quant_modes=False)
    batch = _batch("llama3-8b/decode/batch2-kv32/block16/fp8")
    _, _, note = peers.setup_for_batch("vllm_unified", batch.spec, "cpu", batch)
    assert "kv_quant_mode" not in seen and seen["k_descale"] is not None and "FP8" not in note


def test_flashinfer_fp8_cache_with_its_scales(fake_flashinfer, monkeypatch):
    def run(self, q, kv, *args, q_scale=None, k_scale=None, v_scale=None, out=None):
        self.ran, self.scales = (q, kv), (k_scale, v_scale)
        return torch.empty_like(q)
    monkeypatch.setattr(_Wrapper, "run", run)
    monkeypatch.setattr(fake_flashinfer, "__version__", "0.7.2.post1", raising=False)
    batch, fn, note, w = _flashinfer("llama3-8b/prefill/batch2-kv32/block16/fp8/bf16")
    kw = w.planned[1]
    assert kw["kv_data_type"] == batch.k_cache.dtype and kw["q_data_type"] == torch.bfloat16
    fn()
    assert w.scales == (float(batch.options["k_scale"]), float(batch.options["v_scale"]))
    assert w.ran[1][0] is batch.k_cache  # the fp8 cache itself, no dequantized copy
    assert note.startswith("flashinfer 0.7.2.post1: ") and "per-tensor k/v scales" in note


# --- flashinfer's XQA decode (TensorRT-LLM's kernel) on the kernels' cache ---------------------------


@pytest.fixture
def fake_xqa(monkeypatch):
    """flashinfer with only `decode.xqa_batch_decode_with_kv_cache`, recording each call."""
    calls = []

    def xqa_batch_decode_with_kv_cache(query, kv_cache, workspace, block_tables, seq_lens, max_seq_len,
                                       **kw):
        calls.append(dict(query=query, kv_cache=kv_cache, workspace=workspace, block_tables=block_tables,
                          seq_lens=seq_lens, max_seq_len=max_seq_len, **kw))
        return torch.empty_like(query)

    mod, decode = types.ModuleType("flashinfer"), types.ModuleType("flashinfer.decode")
    decode.xqa_batch_decode_with_kv_cache = xqa_batch_decode_with_kv_cache
    mod.decode, mod.__version__ = decode, "0.7.4"
    monkeypatch.setitem(sys.modules, "flashinfer", mod)
    monkeypatch.setitem(sys.modules, "flashinfer.decode", decode)
    monkeypatch.setattr(peers, "FLASHINFER_WORKSPACE_BYTES", 4096)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    return calls


def test_xqa_decodes_the_kernels_cache_in_place_with_the_scales_folded(fake_xqa):
    """One query per sequence over an OCP e4m3 cache: the kernels' q, caches and block table as they
    are, the lengths in XQA's uint32, k_scale folded into the score's scale and v_scale into the
    output's, the workspace zeroed before its first use (XQA's semaphores)."""
    batch = _batch("qwen2.5-7b/decode/batch3-kv40-var/block16/fp8/bf16")
    fn, label, note = peers.setup_for_batch("flashinfer_xqa", batch.spec, "cpu", batch)
    fn()
    first, timed = fake_xqa  # the untimed first call (a refusal is a note), then the timed one
    assert timed.keys() == first.keys()
    assert timed["query"] is batch.q and timed["block_tables"] is batch.block_table
    assert timed["kv_cache"][0] is batch.k_cache and timed["kv_cache"][1] is batch.v_cache
    assert timed["seq_lens"].dtype == torch.uint32
    assert timed["seq_lens"].tolist() == batch.seq_lens.tolist() and timed["seq_lens"] is first["seq_lens"]
    assert timed["max_seq_len"] == max(batch.spec.kv_lens) and timed["kv_layout"] == "NHD"
    scale, k_scale, v_scale = (float(batch.options[k]) for k in ("scale", "k_scale", "v_scale"))
    assert timed["bmm1_scale"] == pytest.approx(scale * k_scale) and timed["bmm2_scale"] == v_scale
    assert k_scale != v_scale  # the two scales go to their own products
    assert timed["workspace"].dtype == torch.uint8 and not timed["workspace"].any()
    assert "XQA" in label and note.startswith("flashinfer 0.7.4: XQA decode") and "rounded to e4m3" in note
    assert peers.PEERS["flashinfer_xqa"].e4m3_products


def test_xqa_over_a_cache_of_the_queries_dtype_has_unit_scales(fake_xqa):
    batch = _batch("llama3-8b/decode/batch2-kv32/block32")
    _, _, note = peers.setup_for_batch("flashinfer_xqa", batch.spec, "cpu", batch)
    (call,) = fake_xqa
    assert call["bmm1_scale"] == batch.options["scale"] and call["bmm2_scale"] == 1.0
    assert "e4m3" not in note and "page size 32" in note


@pytest.mark.parametrize("name, why", [
    ("llama3-8b/prefill/batch2-kv32/block16", "prefill or multi-token decode"),
    ("qwen2.5-7b/decode/batch2-kv64-q2/block16", "prefill or multi-token decode"),
    ("gemma2-9b/decode/batch2-kv64/block16/softcap50", "softcap"),
    ("llama3-8b/decode/batch2-kv64/block16/window16", "sliding window"),
    ("gpt-oss-20b/decode/batch2-kv64/block16/sinks", "sinks"),
    ("llama3-8b/decode/batch2-kv64/block8", "page size 8"),
])
def test_xqa_refuses_what_this_peer_does_not_time(fake_xqa, name, why):
    batch = _batch(name)
    with pytest.raises(peers.PeerUnavailable, match=f"flashinfer XQA has no {why} \\("):
        peers.setup_for_batch("flashinfer_xqa", batch.spec, "cpu", batch)
    assert not fake_xqa  # refused before any call


def test_xqa_refuses_an_fnuz_cache_it_would_read_as_another_format(fake_xqa):
    from kernels.batch import build_batch
    from kernels.inputs import FP8_FORMATS

    fnuz = [d for d in FP8_FORMATS if d is not torch.float8_e4m3fn]
    batch = build_batch(Scenario.parse("llama3-8b/decode/batch2-kv32/block16/fp8/bf16").spec(), "cpu",
                        fp8_dtype=fnuz[0])
    with pytest.raises(peers.PeerUnavailable, match="its caches are the queries' dtype or OCP e4m3"):
        peers.setup_for_batch("flashinfer_xqa", batch.spec, "cpu", batch)


def test_a_flashinfer_without_xqa_is_a_note(monkeypatch):
    mod = types.ModuleType("flashinfer")
    monkeypatch.setitem(sys.modules, "flashinfer", mod)
    monkeypatch.setitem(sys.modules, "flashinfer.decode", types.ModuleType("flashinfer.decode"))
    batch = _batch("llama3-8b/decode/batch2-kv32/block16")
    with pytest.raises(peers.PeerUnavailable, match="flashinfer has no XQA decode here"):
        peers.setup_for_batch("flashinfer_xqa", batch.spec, "cpu", batch)


# --- FlashAttention-3 (its Hopper kernels) on the kernels' cache ---------------------------------------


@pytest.fixture
def fake_fa3(monkeypatch):
    """`flash_attn_interface` with its scheduler metadata and `flash_attn_with_kvcache`, recording calls."""
    calls = {"metadata": [], "attention": []}
    mod = types.ModuleType("flash_attn_interface")

    def get_scheduler_metadata(*args, **kw):
        calls["metadata"].append((args, kw))
        return torch.zeros(4, dtype=torch.int32)

    def flash_attn_with_kvcache(q, k_cache, v_cache, **kw):
        calls["attention"].append(dict(q=q, k_cache=k_cache, v_cache=v_cache, **kw))
        return torch.empty(q.shape, dtype=torch.bfloat16)

    mod.get_scheduler_metadata, mod.flash_attn_with_kvcache = get_scheduler_metadata, flash_attn_with_kvcache
    monkeypatch.setitem(sys.modules, "flash_attn_interface", mod)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    return calls


def test_fa3_reads_the_kernels_cache_in_place_and_rounds_q_in_each_call(fake_fa3):
    """Over an OCP e4m3 cache: the kernels' caches, block table, lengths and cu_seqlens_q as they are,
    causal, its metadata made once at setup and passed on; each call rounds the batch's q to e4m3 as it
    is at that call (a peer that rounded it once would not time that rounding), with the q, k and v
    scales as per-(sequence, KV head) descales."""
    batch = _batch("qwen2.5-7b/decode/batch3-kv40-var/block16/fp8/bf16")
    fn, label, note = peers.setup_for_batch("flash_attn_3", batch.spec, "cpu", batch)
    batch.q.mul_(2)  # the timed call reads q as it is now
    fn()
    (args, kw), = fake_fa3["metadata"]  # once, at setup
    assert args[:6] == (3, 1, max(batch.spec.kv_lens), 28, 4, 128) and kw["page_size"] == 16
    assert kw["qkv_dtype"] == torch.float8_e4m3fn and kw["causal"] and kw["num_splits"] == 0
    first, timed = fake_fa3["attention"]
    assert timed["k_cache"] is batch.k_cache and timed["v_cache"] is batch.v_cache
    assert timed["page_table"] is batch.block_table and timed["cache_seqlens"] is batch.seq_lens
    assert timed["cu_seqlens_q"] is batch.cu_seqlens_q and timed["max_seqlen_q"] == 1 and timed["causal"]
    assert timed["scheduler_metadata"] is first["scheduler_metadata"]
    assert timed["q"].dtype == torch.float8_e4m3fn
    assert torch.equal(timed["q"].float(), batch.q.to(torch.float8_e4m3fn).float())  # scale 1: q fits
    k_scale, v_scale = (float(batch.options[k]) for k in ("k_scale", "v_scale"))
    for name, value in (("q_descale", 1.0), ("k_descale", k_scale), ("v_descale", v_scale)):
        assert timed[name].shape == (3, 4) and torch.all(timed[name] == value), name
    assert timed["softmax_scale"] == batch.options["scale"] and timed["window_size"] == (-1, -1)
    assert "FlashAttention-3" in label and "q rounded to e4m3 in the call" in note
    assert peers.PEERS["flash_attn_3"].e4m3_products and "flash_attn_3" in peers.VENDOR_PEERS["nvidia"]


def test_fa3_over_a_cache_of_the_queries_dtype_takes_q_as_it_is(fake_fa3):
    batch = _batch("llama3-8b/prefill/batch2-kv32/block16/window16")
    _, _, note = peers.setup_for_batch("flash_attn_3", batch.spec, "cpu", batch)
    (call,) = fake_fa3["attention"]
    assert call["q"] is batch.q and not {"q_descale", "k_descale", "v_descale"} & set(call)
    assert call["max_seqlen_q"] == max(batch.spec.query_lens) and call["window_size"] == (15, 0)
    assert "e4m3" not in note


def test_fa3_forced_splits_reach_its_metadata_and_its_call(fake_fa3):
    batch = _batch("llama3-8b/decode/batch2-kv32/block16/fp8/bf16")
    call, round_q = peers.flash_attn_3_call(batch, "cpu", num_splits=4)
    call(round_q(batch.q))
    (_, kw), = fake_fa3["metadata"]
    assert kw["num_splits"] == 4 and fake_fa3["attention"][0]["num_splits"] == 4


@pytest.mark.parametrize("name, fnuz, why", [
    ("gpt-oss-20b/decode/batch2-kv64/block16/sinks", False, "sinks"),
    ("llama3-8b/decode/batch2-kv32/block16/fp8/bf16", True, "its caches are the queries' dtype or OCP e4m3"),
])
def test_fa3_refuses_what_it_would_compute_otherwise(fake_fa3, name, fnuz, why):
    from kernels.batch import build_batch
    from kernels.inputs import FP8_FORMATS

    other = [d for d in FP8_FORMATS if d is not torch.float8_e4m3fn][0] if fnuz else None
    batch = build_batch(Scenario.parse(name).spec(), "cpu", **({"fp8_dtype": other} if fnuz else {}))
    with pytest.raises(peers.PeerUnavailable, match=f"FlashAttention-3 has no .*{why}"):
        peers.setup_for_batch("flash_attn_3", batch.spec, "cpu", batch)
    assert not fake_fa3["metadata"] and not fake_fa3["attention"]


@pytest.mark.parametrize("name, flag, feature", [
    ("gemma2-9b/decode/batch2-kv64/block16/softcap50", "SOFTCAP", "softcap"),
    ("llama3-8b/decode/batch2-kv64/block16/window16", "LOCAL", "sliding window"),
    ("llama3-8b/decode/batch2-kv32/block16/fp8/bf16", "FP8", "fp8 cache"),
    ("llama3-8b/decode/batch2-kv32/block16", "HDIM128", "head size 128"),
])
def test_fa3_refuses_what_its_build_left_out(fake_fa3, monkeypatch, name, flag, feature):
    """A FlashAttention-3 built without a feature would run the batch without it (no softcap, no window):
    the flags its setup.py writes (`flash_attn_config`) refuse it instead; the same build takes batches that
    need none of them."""
    config = types.ModuleType("flash_attn_config")
    flags = {f"FLASHATTENTION_DISABLE_{f}": f in (flag, "HDIM192", "HDIM256") for f in
             ("SOFTCAP", "LOCAL", "FP8", "FP16", "HDIM64", "HDIM96", "HDIM128", "HDIM192", "HDIM256")}
    config.CONFIG = {"build_flags": flags}
    monkeypatch.setitem(sys.modules, "flash_attn_config", config)
    batch = _batch(name)
    why = f"FlashAttention-3 has no {feature} \\(this build has none\\)"
    with pytest.raises(peers.PeerUnavailable, match=why):
        peers.setup_for_batch("flash_attn_3", batch.spec, "cpu", batch)
    # what needs none of it runs: a head of 128, or of 64 where 128 is left out
    plain = _batch("gpt-oss-20b/decode/batch2-kv64/block16" if flag == "HDIM128"
                   else "llama3-8b/decode/batch2-kv32/block16")
    peers.setup_for_batch("flash_attn_3", plain.spec, "cpu", plain)


@given(st.floats(min_value=1e-3, max_value=1e30, allow_nan=False))
def test_the_e4m3_q_scale_keeps_q_in_range_and_is_one_or_a_power_of_two(largest):
    q = torch.tensor([-largest, largest / 3], dtype=torch.float32)
    scale = peers.e4m3_q_scale(q)
    top = torch.finfo(torch.float8_e4m3fn).max
    assert scale == 1.0 or (scale > 1 and math.log2(scale).is_integer())
    assert float(q.abs().max()) / scale <= top  # never rounded to NaN
    assert scale == 1.0 or float(q.abs().max()) / scale > top / 2  # the largest power of two that fits
    assert torch.isfinite((q / scale).to(torch.float8_e4m3fn).float()).all()


@pytest.mark.parametrize("fp8, off, timed", [(True, 0.1, True), (True, 0.2, False), (False, 0.1, False)])
def test_a_peer_rounding_its_products_to_e4m3_is_held_to_their_tolerance(monkeypatch, fp8, off, timed):
    """Over an e4m3 cache a peer that rounds q and P to e4m3 (XQA, FlashAttention-3's fp8 path) is held
    to the fp8 products' tolerance against q itself, as a launch of ours that rounds P is; over a
    cache of the queries' dtype, and beyond that tolerance, an error that large is a wrong output."""
    from kernels.reference import paged_attention_reference
    from perf.measure import check, peer_cases

    def shifted(batch, device):
        return (lambda: paged_attention_reference(*batch.args(), **batch.options) + off), "shifted"

    assert check.FP8_PRODUCTS_TOLERANCE[0] == 0.125  # 0.1 inside, 0.2 outside (rtol adds < 2^-4 here)
    monkeypatch.setitem(peers.PEERS, "rounds", peers.Peer("rounds", "rounds", "torch", shifted, checked=True,
                                                          e4m3_products=True))
    scenario = Scenario.parse("tiny/decode/batch2-kv16/block16" + ("/fp8/bf16" if fp8 else "/bf16"))
    case = peer_cases.make_case("rounds", scenario, "cpu")
    assert (case.fn is not None) == timed, case.skip
    if not timed:
        assert case.kind == "error" and case.skip.startswith(check.WRONG)


def test_library_versions_from_metadata_module_or_unknown(monkeypatch):
    assert peers.library_version("torch") == __import__("importlib.metadata").metadata.version("torch")
    fake = types.ModuleType("flashinfer")
    monkeypatch.setitem(sys.modules, "flashinfer", fake)
    assert peers.library_version("flashinfer") == "version unknown"
    fake.__version__ = "0.7.2.post1"
    assert peers.library_version("flashinfer.prefill") == "0.7.2.post1"


# --- peers as cases of a side -------------------------------------------------------------------


def _fake_kernels():
    from kernels.reference import paged_attention_reference

    def variant(*args, out, **options):  # right, or the measuring stage's output check refuses to time it
        paged_attention_reference(*args, out=out, **options)

    return types.SimpleNamespace(VARIANTS={"fake": variant})


@contextlib.contextmanager
def _fake_side(path):
    """A side of the fake kernels writing to `path`, prepared for one tiny scenario."""
    from perf.measure.rounds import Side

    scenario = Scenario.parse("tiny/mixed50/batch2-kv16/block16")
    header = {"environment": {"vendor": "cpu", "gpu": "none"}}
    with results.ResultsWriter(str(path), header, resume=False) as w:
        side = Side(_fake_kernels(), ["fake"], [scenario], ["eager"], 2, w)
        side.device = "cpu"
        yield side, scenario, side.prepare(scenario)


def test_attached_peers_are_measured_in_the_variants_rounds(tmp_path, monkeypatch):
    from perf.measure import peer_cases

    given = []

    def setup(batch, device):
        given.append(batch)
        return (lambda: batch.q.sum()), "a stand-in"

    def broken(batch, device):
        raise peers.PeerUnavailable("refuses this one")

    monkeypatch.setitem(peers.PEERS, "cpu_sum", peers.Peer("cpu_sum", "sum of q", "torch", setup))
    monkeypatch.setitem(peers.PEERS, "refuser", peers.Peer("refuser", "never runs", "torch", broken))
    path = tmp_path / "r.jsonl"
    with _fake_side(path) as (side, scenario, cases):
        added = peer_cases.attach(side, scenario, ("cpu_sum", "refuser"), cases)
        assert [c.variant for c in added] == ["peer:cpu_sum", "peer:refuser"]
        assert given == [cases[0].keep[0]]  # the variants' batch, not a second one
        assert side.round(0, seed=1) == 2  # the variant and the working peer, one round
        peer_cases.detach(side, scenario, ("cpu_sum", "refuser"))
        side.release(scenario)
        assert side.cases == {}
    res = results.load(str(path))
    assert sorted(r["variant"] for r in res.measurements()) == ["fake", "peer:cpu_sum"]
    (peer_record,) = [r for r in res.measurements() if r["variant"] == "peer:cpu_sum"]
    assert peer_record["config"] == [{"peer": "cpu_sum", "label": "sum of q",
                                      "layout": "a stand-in; output not checked"}]
    assert [(r["variant"], r["reason"]) for r in res.skips()] == [("peer:refuser", "refuses this one")]


def test_a_peer_with_a_wrong_output_is_dropped_not_timed(tmp_path, monkeypatch):
    """A checked peer whose output is off the fp32 reference is an error naming the max error,
    never a measurement; one that returns the reference's output is timed."""
    from kernels.reference import paged_attention_reference
    from perf.measure import peer_cases

    def right(batch, device):
        return (lambda: paged_attention_reference(*batch.args(), **batch.options)), "right"

    def off(batch, device):
        return (lambda: paged_attention_reference(*batch.args(), **batch.options) + 0.5), "off by 0.5"

    monkeypatch.setitem(peers.PEERS, "right", peers.Peer("right", "right", "torch", right, checked=True))
    monkeypatch.setitem(peers.PEERS, "off", peers.Peer("off", "off", "torch", off, checked=True))
    path = tmp_path / "r.jsonl"
    with _fake_side(path) as (side, scenario, cases):
        peer_cases.attach(side, scenario, ("right", "off"), cases)
        side.round(0, seed=1)
    res = results.load(str(path))
    assert sorted(r["variant"] for r in res.measurements()) == ["fake", "peer:right"]
    (why,) = [r for r in res.skips() if r["variant"] == "peer:off"]
    assert why["kind"] == "error" and why["reason"].startswith("wrong output before timing: max error 0.5")


@pytest.mark.parametrize("scenario", ["tiny/prefill/batch2-kv24-var-chunk4/block16/window8",
                                      "tiny/mixed50/batch2-kv16/block16"])
def test_a_repaged_copy_holds_the_same_keys_and_values(scenario):
    """flash_attn reads the batch's cache copied into its own page size: the same data, so the
    reference over the copy is the reference over the batch (its output is checked against it)."""
    from kernels.batch import build_batch
    from kernels.reference import paged_attention_reference

    batch = build_batch(Scenario.parse(scenario).spec(), "cpu")
    k, v, table = peers.repaged(batch, 64)
    assert k.shape[1] == 64 and table.shape[0] == batch.spec.num_seqs
    args = (batch.q, k, v, table, batch.cu_seqlens_q, batch.seq_lens)
    assert torch.equal(paged_attention_reference(*args, **batch.options),
                       paged_attention_reference(*batch.args(), **batch.options))

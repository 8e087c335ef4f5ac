"""`Config.warp_specialized`: the prefill through the Gluon kernel of
`kernels.paged_attention.warp_specialized` (a TMA loader warp, two consumer warpgroups) on NVIDIA sm_90.

Where the planner takes it (plans only, with the platform stood in for: dtypes, heads, blocks,
features, layouts, addresses, GPUs), what it compiles to for sm_90 on a CPU (the register split, the
products and copies it was written for, shared memory within an SM's), then on an sm_90 GPU the
kernel against the fp32 reference over awkward batches: several Q-blocks per sequence, contexts
before the queries, decodes and partial Q-blocks, every cache block size it takes, the last cache
block partly filled, outputs and unowned cache slots poisoned (NaN). Gluon has no interpreter mode,
so on a CPU the last part is skipped.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch
from grid_cases import seed

from kernels import VARIANTS, platform
from kernels.batch import BatchSpec, build_batch
from kernels.inputs import OCP_E4M3
from kernels.paged_attention import planning
from kernels.paged_attention.heuristics import Config
from kernels.reference import paged_attention_reference
from perf.measure.check import TOLERANCES

pytest.importorskip("triton.experimental.gluon", reason="this Triton has no Gluon (3.6 and later)")
pytestmark = pytest.mark.slow  # the sm_90 compile starts a process: it must not see the interpreter's env

WS = Config(128, 128, 1, num_warps=8, num_stages=2, warp_specialized=True)
HOPPER = platform.Platform("nvidia", "sm_90", "NVIDIA H200", 32, 132)


def _kernels(batch, config: Config = WS, vendor: str | None = "nvidia", **options) -> list[str]:
    planning.release_buffers()  # plans are kept by layout; the platform stood in for is not part of it
    _, launches = VARIANTS["static_grid"].plan(*batch.args(), out=batch.new_output(), config=config,
                                               vendor=vendor, num_sms=132, **{**batch.options, **options})
    return [launch.name for launch in launches]


@pytest.fixture
def hopper(monkeypatch):
    monkeypatch.setattr(platform, "current", lambda: HOPPER)


def _batch(dtype="bfloat16", head_size=128, block_size=16, fp8=False, **spec):
    spec = BatchSpec((5, 300), (40, 700), num_q_heads=8, num_kv_heads=2, head_size=head_size,
                     block_size=block_size, dtype=dtype, fp8_kv=fp8, **spec)
    return build_batch(spec, "cpu", fill=False, **({"fp8_dtype": OCP_E4M3} if fp8 else {}))


@pytest.mark.parametrize("dtype,head_size,block_size", [
    ("bfloat16", 128, 16), ("float16", 128, 32), ("bfloat16", 64, 64), ("bfloat16", 128, 128)])
def test_the_planner_takes_the_kernel_on_sm90(hopper, dtype, head_size, block_size):
    batch = _batch(dtype, head_size, block_size)
    assert _kernels(batch) == ["ws_prefill_kernel"]
    assert _kernels(batch, dataclasses.replace(WS, warp_specialized=False)) == ["q_block_kernel"]


@pytest.mark.parametrize("change", [
    dict(head_size=96), dict(head_size=256), dict(block_size=8), dict(block_size=544), dict(fp8=True),
    dict(sliding_window=37), dict(softcap=20.0), dict(sinks=True)])
def test_what_the_kernel_lacks_keeps_the_q_block_kernel(hopper, change):
    assert _kernels(_batch(**change)) == ["q_block_kernel"]


@pytest.mark.parametrize("arch,vendor", [("sm_80", "nvidia"), ("sm_100", "nvidia"), ("gfx942", "amd"),
                                         ("interpreter", "cpu")])
def test_other_gpus_and_a_cpu_keep_the_q_block_kernel(monkeypatch, arch, vendor):
    """wgmma, TMA and setmaxnreg are sm_90's, and Gluon has no interpreter: planned anywhere else
    (the static gate plans from a CPU), the Q-block kernel."""
    monkeypatch.setattr(platform, "current", lambda: platform.Platform(vendor, arch, arch, 32, 132))
    assert _kernels(_batch(), vendor="amd" if vendor == "amd" else "nvidia") == ["q_block_kernel"]


def _unaligned(cache):
    """The same shape and strides, two bytes in: TMA's 16-byte alignment broken."""
    return torch.empty(cache.numel() + 8, dtype=cache.dtype)[1:1 + cache.numel()].view(cache.shape)


def test_layouts_tma_cannot_read_keep_the_q_block_kernel(hopper):
    batch = _batch()
    q, k, v, table, cu, lens = batch.args()

    def plan(*call):
        planning.release_buffers()
        _, launches = VARIANTS["static_grid"].plan(*call, out=torch.empty_like(q), config=WS,
                                                   vendor="nvidia", num_sms=132, **batch.options)
        return [launch.name for launch in launches]
    assert plan(*batch.args()) == ["ws_prefill_kernel"]
    assert plan(q, _unaligned(k), v, table, cu, lens) == ["q_block_kernel"]
    heads_apart = torch.empty(*k.shape[:3], 2 * k.shape[3], dtype=k.dtype)[..., :k.shape[3]]
    assert plan(q, heads_apart, v, table, cu, lens) == ["q_block_kernel"]
    assert plan(*batch.args()) == ["ws_prefill_kernel"]


def test_a_plan_kept_for_aligned_tensors_is_not_reused_for_unaligned_ones(hopper):
    """Plans are kept by layout, which reads no address: the alignment TMA needs is part of the key."""
    planning.release_buffers()
    batch = _batch()
    q, k, v, table, cu, lens = batch.args()
    names = []
    for cache in (k, _unaligned(k), k):
        _, launches = VARIANTS["static_grid"].plan(q, cache, v, table, cu, lens, out=torch.empty_like(q),
                                                   config=WS, vendor="nvidia", num_sms=132, **batch.options)
        names.append(launches[0].name)
    assert names == ["ws_prefill_kernel", "q_block_kernel", "ws_prefill_kernel"]


COMPILE = """
import json
import triton
from triton.backends.compiler import GPUTarget
from triton.runtime.jit import mangle_type
from kernels import VARIANTS, platform
from kernels.batch import BatchSpec, build_batch
from kernels.paged_attention.heuristics import Config
from triton.experimental.gluon._runtime import GluonASTSource

platform.current = lambda: platform.Platform("nvidia", "sm_90", "H200", 32, 132)
facts = {}
for head, block in ((128, 16), (64, 128)):
    spec = BatchSpec((5, 300), (40, 700), num_q_heads=8, num_kv_heads=2, head_size=head, block_size=block,
                     dtype="bfloat16")
    batch = build_batch(spec, "cpu", fill=False)
    config = Config(128, 128, 1, num_warps=8, num_stages=2, warp_specialized=True)
    _, [launch] = VARIANTS["static_grid"].plan(*batch.args(), out=batch.new_output(), vendor="nvidia",
                                               num_sms=132, config=config, **batch.options)
    signature = {name: mangle_type(value) for name, value in launch.args.items()}
    signature.update(dict.fromkeys(launch.constexprs, "constexpr"))
    compiled = triton.compile(GluonASTSource(launch.kernel, signature, launch.constexprs),
                              target=GPUTarget("cuda", 90, 32),
                              options=dict(num_warps=launch.num_warps, **launch.vendor_options))
    ptx = compiled.asm["ptx"]
    regs = [line.split() for line in ptx.splitlines() if "setmaxnreg" in line]
    facts[f"{head}/{block}"] = dict(
        shared=compiled.metadata.shared, num_warps=compiled.metadata.num_warps,
        setmaxnreg=sorted({r[0].split(".")[1] + " " + r[-1].rstrip(";") for r in regs}),
        wgmma=ptx.count("wgmma.mma_async"), tma=ptx.count("cp.async.bulk.tensor"))
print(json.dumps(facts))
"""


def test_it_compiles_for_sm90_to_the_partitions_it_was_written_for(tmp_path):
    from kernels.paged_attention import warp_specialized as ws

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=root, TRITON_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", COMPILE], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    for shape, f in facts.items():
        assert f["num_warps"] == 12, (shape, f)  # 4 default + 4 + the loader's warpgroup
        assert f["shared"] <= 227 * 1024, (shape, f)  # an sm_90 SM's shared memory for one block
        assert f"dec {ws.LOADER_REGS}" in f["setmaxnreg"], (shape, f)  # the loader gives registers up
        assert f"inc {ws.CONSUMER_REGS}" in f["setmaxnreg"], (shape, f)  # to the consumers
        assert f["tma"] > 0, (shape, f)
    # per consumer, Q K^T (head / 16 wgmma over 128 keys) and P V (128 / 16 over the head) twice each:
    # the first tile's Q K^T before the loop, the last tile's P V after it
    assert facts["128/16"]["wgmma"] == 2 * 2 * (128 // 16 + 128 // 16)
    assert facts["64/128"]["wgmma"] == 2 * 2 * (64 // 16 + 128 // 16)


# (query lens, kv lens) per batch: several Q-blocks per sequence with and without context before the
# queries, a decode and a partial Q-block beside them, a last cache block partly filled; a chunk of
# 129 queries after 334 keys; one long prompt of no multiple of the tile.
GPU_BATCHES = {
    "mixed": ((300, 1, 129, 17, 64), (300, 1328, 463, 17, 1000)),
    "chunk": ((129,), (463,)),
    "prompt_1000": ((1000,), (1000,)),
}
GPU_CASES = [
    ("mixed", 8, 2, 128, 16, "bfloat16"),
    ("mixed", 10, 2, 128, 32, "float16"),
    ("mixed", 8, 1, 64, 64, "bfloat16"),
    ("chunk", 4, 4, 128, 128, "bfloat16"),
    ("prompt_1000", 32, 8, 128, 16, "bfloat16"),
    ("prompt_1000", 8, 2, 64, 128, "float16"),
]


def _on_sm90(device: str) -> None:
    if device == "cpu":
        pytest.skip("Gluon has no interpreter mode: the kernel runs on an sm_90 GPU only")
    if platform.current().arch != planning.WARP_SPECIALIZED_ARCH:
        pytest.skip(f"the kernel is sm_90's; this GPU is {platform.current().arch}")


@pytest.mark.parametrize("name,q_heads,kv_heads,head_size,block_size,dtype", GPU_CASES)
def test_the_kernel_matches_the_reference(name, q_heads, kv_heads, head_size, block_size, dtype, device):
    _on_sm90(device)
    query_lens, kv_lens = GPU_BATCHES[name]
    spec = BatchSpec(query_lens, kv_lens, num_q_heads=q_heads, num_kv_heads=kv_heads, head_size=head_size,
                     block_size=block_size, dtype=dtype,
                     seed=seed("warp_specialized", name, q_heads, head_size, block_size))
    batch = build_batch(spec, device, poison=True)
    assert _kernels(batch, vendor=None) == ["ws_prefill_kernel"]
    out = batch.new_output()  # NaN: an unwritten element fails
    VARIANTS["static_grid"](*batch.args(), out=out, config=WS, **batch.options)
    expected = paged_attention_reference(*batch.args(), **batch.options).float()
    atol, rtol = TOLERANCES[dtype]  # the correctness grid's
    torch.testing.assert_close(out.float(), expected, atol=atol, rtol=rtol)


def test_the_trees_prompt_is_the_kernel_on_sm90(device):
    """As a serving engine calls it: the NVIDIA tree's own choice for a bf16 prompt of 2k tokens."""
    _on_sm90(device)
    spec = BatchSpec((2048,), (2048,), num_q_heads=32, num_kv_heads=8, dtype="bfloat16", seed=7)
    batch = build_batch(spec, device, poison=True)
    assert _kernels(batch, config=None, vendor=None) == ["ws_prefill_kernel"]
    out = batch.new_output()
    VARIANTS["static_grid"](*batch.args(), out=out, **batch.options)
    expected = paged_attention_reference(*batch.args(), **batch.options).float()
    atol, rtol = TOLERANCES["bfloat16"]
    torch.testing.assert_close(out.float(), expected, atol=atol, rtol=rtol)


@pytest.mark.parametrize("corruption", ["keys_short_of_queries", "keys_past_the_row"])
def test_a_sequence_failing_keys_ok_gets_rows_of_zeros(corruption, device):
    """Metadata the value checks would refuse (they are off, as on the serving path): the sequence
    whose key count fails `common.keys_ok` gets rows of zeros, as from the Q-block kernel, and the
    other sequence of the batch its attention."""
    _on_sm90(device)
    spec = BatchSpec((300, 129), (300, 463), num_q_heads=8, num_kv_heads=2, dtype="bfloat16",
                     seed=seed("warp_specialized_keys_ok", corruption))
    batch = build_batch(spec, device, poison=True)
    q, k, v, table, cu_seqlens, seq_lens = batch.args()
    corrupt = seq_lens.clone()
    corrupt[0] = 299 if corruption == "keys_short_of_queries" else table.shape[1] * spec.block_size + 1
    out = batch.new_output()
    VARIANTS["static_grid"](q, k, v, table, cu_seqlens, corrupt, out=out, config=WS, check_values=False,
                            **batch.options)
    assert torch.equal(out[:300].float(), torch.zeros_like(out[:300].float()))
    expected = paged_attention_reference(*batch.args(), **batch.options).float()
    atol, rtol = TOLERANCES["bfloat16"]
    torch.testing.assert_close(out[300:].float(), expected[300:], atol=atol, rtol=rtol)

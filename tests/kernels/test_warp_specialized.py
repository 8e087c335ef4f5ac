"""`Config.warp_specialized`: the prefill through the Gluon kernel of
`kernels.paged_attention.warp_specialized` (a TMA loader warp, two consumer warpgroups; over an OCP e4m3 cache
a converter warpgroup too) on NVIDIA sm_90.

Where the planner and the NVIDIA tree take it (plans only, with
the platform stood in for: dtypes, fp8 formats, heads, blocks, features, layouts, addresses, GPUs) and its
persistent grid, what it compiles to for sm_90 on a CPU (the register split, the products and copies it was
written for, shared memory within an SM's), then on an sm_90 GPU the kernel against the fp32 reference over
awkward batches, 16-bit and e4m3 caches: several Q-blocks per sequence, contexts before the queries, decodes
and partial Q-blocks, every cache block size it takes, the last cache block partly filled, outputs and unowned
cache slots poisoned (NaN); and a sequence's output the same bits alone and in a batch. With
`Config.ws_pack_gqa`, a decode's (or a few-query sequence's) heads packed into one work item a KV head: where
the planner takes it, and on the GPU groups of 4-64 heads against the reference. The same for its decode form
over e4m3, `Config.ws_token_items` (a work item a token's query heads of one KV head): where the planner takes
it, what it compiles to, and on the GPU decodes of awkward groups, blocks, contexts and query counts against
the reference. Gluon has no interpreter mode, so on a CPU the GPU parts are skipped.
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
from interpreter_support import planned_check

from kernels import VARIANTS, platform
from kernels.batch import BatchSpec, build_batch
from kernels.inputs import FNUZ_E4M3, OCP_E4M3
from kernels.paged_attention import planning
from kernels.paged_attention.heuristics import Config
from perf.measure import check
from perf.measure.check import TOLERANCES

pytest.importorskip("triton.experimental.gluon", reason="this Triton has no Gluon (3.6 and later)")
pytestmark = pytest.mark.slow  # the sm_90 compile starts a process: it must not see the interpreter's env

WS = Config(128, 128, 1, num_warps=8, num_stages=2, warp_specialized=True)
WS_ROUNDED = dataclasses.replace(WS, qk_e4m3=True)  # over e4m3: q rounded to one e4m3 part, not two
WS_Q_ROUNDED = dataclasses.replace(WS, ws_q_rounded=True)  # the same, which the Q-block kernel ignores
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


@pytest.mark.parametrize("dtype,head_size,block_size,fp8", [
    ("bfloat16", 128, 16, False), ("float16", 128, 32, False), ("bfloat16", 64, 64, False),
    ("bfloat16", 128, 128, False), ("bfloat16", 128, 16, True), ("float16", 128, 64, True)])
def test_the_planner_takes_the_kernel_on_sm90(hopper, dtype, head_size, block_size, fp8):
    batch = _batch(dtype, head_size, block_size, fp8)
    assert _kernels(batch) == ["ws_prefill_kernel"]
    assert _kernels(batch, dataclasses.replace(WS, warp_specialized=False)) == ["q_block_kernel"]


# (queries, keys, query heads, KV heads, dtype, e4m3 cache): batches the tree gives the Gluon kernel, of
# lengths no tile divides
PROMPT_BATCHES = [
    ((520,) * 4, (520,) * 4, 32, 8, "bfloat16", False),  # [ws-short-prompts]: alike whole prompts
    ((300,) * 16, (300,) * 16, 28, 4, "bfloat16", False),
    ((257,) * 17, (257,) * 17, 32, 8, "float16", False),
    # [ws-large-batches]
    ((1000, 1, 1000, 1, 1000, 1, 1000, 1, 1000, 1), (1000, 900, 1000, 37, 1000, 1500, 1000, 900, 1000, 2000),
     28, 4, "bfloat16", False),  # decodes beside prompts
    ((300,) * 14, (1500, 1200, 301, 1999) * 3 + (300, 700), 32, 8, "bfloat16", False),  # chunks, contexts
    ((700, 257, 1100, 1, 400, 900, 650, 1, 300, 1), (700, 257, 1100, 64, 400, 1000, 650, 129, 300, 500),
     32, 8, "float16", False),  # unlike lengths, decodes among them
    ((300,) * 14 + (1,) * 2, (300,) * 14 + (1000, 77), 32, 8, "bfloat16", True),  # over e4m3, q rounded
    ((300,) * 14 + (1,) * 2, (301,) * 14 + (1000, 77), 32, 8, "float16", True),  # fp16 over e4m3, q rounded
]


def _prompts(dtype, fp8, prompts, kernel, q_parts):
    return prompts, prompts, 32, 8, dtype, fp8, kernel, q_parts


@pytest.mark.parametrize("queries,keys,q_heads,kv_heads,dtype,fp8,kernel,q_parts", [
    _prompts("bfloat16", False, (2048,), "ws_prefill_kernel", None),
    _prompts("bfloat16", True, (2048,), "ws_prefill_kernel", 1),
    _prompts("bfloat16", True, (1024,) * 8, "ws_prefill_kernel", 1),
    _prompts("bfloat16", True, (512,) * 4, "q_block_kernel", None),  # short prompts over e4m3, too few tokens
    _prompts("bfloat16", False, (128,) * 64, "q_block_kernel", None),  # prompts below the bounds
    _prompts("float16", True, (2048,), "ws_prefill_kernel", 1),  # fp16 queries over e4m3: `ws_q_rounded`
    _prompts("float16", True, (512,) * 4, "q_block_kernel", None),  # too few tokens
    # the batches of the GPU test below, q rounded to one e4m3 part over e4m3
    *[(*batch, "ws_prefill_kernel", 1 if batch[-1] else None) for batch in PROMPT_BATCHES],
])
def test_the_nvidia_tree_takes_the_kernel_for_long_prefills(hopper, queries, keys, q_heads, kv_heads, dtype,
                                                            fp8, kernel, q_parts):
    """[warp-specialized], [warp-specialized-e4m3], [ws-e4m3-fp16], [ws-fp16-q-rounded], [ws-short-prompts]
    and [ws-large-batches] as the tree plans them on any machine as on sm_90, with no config hint (the
    lengths hinted, as vLLM passes them)."""
    spec = BatchSpec(queries, keys, num_q_heads=q_heads, num_kv_heads=kv_heads, dtype=dtype, fp8_kv=fp8)
    batch = build_batch(spec, "cpu", fill=False, **({"fp8_dtype": OCP_E4M3} if fp8 else {}))
    planning.release_buffers()
    _, launches = VARIANTS["static_grid"].plan(*batch.args(), out=batch.new_output(), vendor="nvidia",
                                               num_sms=132, max_seqlen_q=max(queries),
                                               max_seqlen_k=max(keys), **batch.options)
    assert [x.name for x in launches] == [kernel]
    assert launches[0].constexprs.get("Q_PARTS") == q_parts
    if kernel == "ws_prefill_kernel":  # [ws-pack-gqa]: over a 16-bit cache, each query's group in 8 rows
        assert launches[0].args["pack_shift"] == (0 if fp8 else 3)


WS_PACKED = dataclasses.replace(WS, ws_pack_gqa=True)


@pytest.mark.parametrize("q_heads,kv_heads,head_size,shift", [
    (28, 4, 128, 3), (32, 8, 128, 3), (8, 4, 64, 3), (32, 2, 128, 4), (64, 2, 64, 5), (64, 1, 64, 6)])
def test_pack_gqa_plans_each_querys_heads_as_rows(hopper, q_heads, kv_heads, head_size, shift):
    """`Config.ws_pack_gqa`: a packed item's rows are each query's group of heads in a power of two of rows,
    at least 8 (a swizzle atom), at most a consumer's 64; q's second descriptor reads them, [tokens x query
    heads, D] in boxes of that many rows."""
    spec = BatchSpec((1, 300), (40, 700), num_q_heads=q_heads, num_kv_heads=kv_heads, head_size=head_size,
                     dtype="bfloat16")
    batch = build_batch(spec, "cpu", fill=False)
    planning.release_buffers()
    _, [launch] = VARIANTS["static_grid"].plan(*batch.args(), out=batch.new_output(), config=WS_PACKED,
                                               vendor="nvidia", num_sms=132, **batch.options)
    assert launch.name == "ws_prefill_kernel" and launch.args["pack_shift"] == shift
    rows = launch.args["qh_desc"]
    assert list(rows.shape) == [301 * q_heads, head_size]
    assert list(rows.block_shape) == [2 ** shift, head_size]
    planning.release_buffers()
    _, [launch] = VARIANTS["static_grid"].plan(*batch.args(), out=batch.new_output(), config=WS,
                                               vendor="nvidia", num_sms=132, **batch.options)
    assert launch.args["pack_shift"] == 0 and launch.args["qh_desc"] is launch.args["q_desc"]


@pytest.mark.parametrize("change", ["fp8", "padded_tokens", "group_of_128"])
def test_what_pack_gqa_lacks_leaves_the_heads_apart(hopper, change):
    """An e4m3 cache (the packed items are written for 16-bit ones), q's tokens apart (its rows are one TMA
    tensor), a group of more heads than a consumer's 64 rows: the kernel's Q-blocks of one query head."""
    q_heads, kv_heads, head_size = (128, 1, 64) if change == "group_of_128" else (32, 8, 128)
    spec = BatchSpec((1, 300), (40, 700), num_q_heads=q_heads, num_kv_heads=kv_heads, head_size=head_size,
                     dtype="bfloat16", fp8_kv=change == "fp8")
    batch = build_batch(spec, "cpu", fill=False, **({"fp8_dtype": OCP_E4M3} if change == "fp8" else {}))
    q, *rest = batch.args()
    if change == "padded_tokens":
        q = torch.empty(q.shape[0], q.shape[1] + 2, q.shape[2], dtype=q.dtype)[:, :q.shape[1]]
    planning.release_buffers()
    _, [launch] = VARIANTS["static_grid"].plan(q, *rest, out=torch.empty_like(batch.q), config=WS_PACKED,
                                               vendor="nvidia", num_sms=132, **batch.options)
    assert launch.name == "ws_prefill_kernel" and launch.args["pack_shift"] == 0


def test_an_e4m3_cache_plans_the_kernel_that_rounds_q_and_reads_the_scales(hopper):
    """The check follows the plan (`perf.measure.check.Reference.of`, `.tolerance`): q rounded to one e4m3
    part against the reference of q so rounded, in two parts (8 bits, bf16's) against q itself, both to
    bf16's tolerance whatever the output's dtype (P V in fp16); and the scales are the call's own tensors."""
    batch = _batch(fp8=True)
    planning.release_buffers()
    _, [launch] = VARIANTS["static_grid"].plan(*batch.args(), out=batch.new_output(), config=WS_ROUNDED,
                                               vendor="nvidia", num_sms=132, **batch.options)
    assert launch.constexprs["Q_PARTS"] == 1 and check.rounds_q_to_e4m3([launch.config()])
    _, [two] = VARIANTS["static_grid"].plan(*batch.args(), out=batch.new_output(), config=WS,
                                            vendor="nvidia", num_sms=132, **batch.options)
    assert two.constexprs["Q_PARTS"] == 2 and not check.rounds_q_to_e4m3([two.config()])
    assert check.tolerance("float16", [two.config()]) == check.TOLERANCES["bfloat16"]
    assert check.tolerance("bfloat16", [two.config()]) == check.TOLERANCES["bfloat16"]
    assert check.tolerance("float16", [launch.config()]) == check.TOLERANCES["bfloat16"]
    assert launch.args["k_scale_ptr"] is batch.options["k_scale"]
    assert launch.args["v_scale_ptr"] is batch.options["v_scale"]
    _, [launch] = VARIANTS["static_grid"].plan(*_batch().args(), out=_batch().new_output(), config=WS,
                                               vendor="nvidia", num_sms=132)
    assert not check.rounds_q_to_e4m3([launch.config()])


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_ws_q_rounded_rounds_q_in_the_kernel_alone(hopper, dtype):
    """`Config.ws_q_rounded`: the Gluon kernel rounds q to one e4m3 part, as under `qk_e4m3`; the Q-block
    kernel, where the Gluon kernel does not apply (here: asked for without it), plans as without the flag."""
    batch = _batch(dtype, fp8=True)

    def plan(config):
        planning.release_buffers()
        return VARIANTS["static_grid"].plan(*batch.args(), out=batch.new_output(), config=config,
                                            vendor="nvidia", num_sms=132, **batch.options)[1]
    [launch] = plan(WS_Q_ROUNDED)
    assert launch.name == "ws_prefill_kernel" and launch.constexprs["Q_PARTS"] == 1
    assert check.rounds_q_to_e4m3([launch.config()])
    qblock = dataclasses.replace(WS, warp_specialized=False)
    assert ([x.config() for x in plan(dataclasses.replace(qblock, ws_q_rounded=True))]
            == [x.config() for x in plan(qblock)])


@pytest.mark.parametrize("prompts", [(2048,), (2048, 2048), (2048,) * 4, (300,)])
@pytest.mark.parametrize("num_sms", [132, 7])
def test_the_kernel_is_persistent_a_program_per_sm(hopper, prompts, num_sms):
    """A program per SM and never more than the work items (query heads x the Q-blocks' bound), drawing
    items from the device's two ticket counters, zeroed and shared by every plan on the device."""
    spec = BatchSpec(prompts, prompts, num_q_heads=8, num_kv_heads=2, dtype="bfloat16")
    batch = build_batch(spec, "cpu", fill=False)
    planning.release_buffers()
    _, [launch] = VARIANTS["static_grid"].plan(*batch.args(), out=batch.new_output(), config=WS,
                                               vendor="nvidia", num_sms=num_sms)
    items = (sum(prompts) // 128 + len(prompts)) * 8
    assert launch.args["num_q_blocks"] * launch.args["num_q_heads"] == items
    assert launch.grid == (min(items, num_sms),)
    tickets = launch.args["tickets_ptr"]
    assert tickets.dtype == torch.int32 and tickets.tolist() == [0, 0]
    assert tickets is planning.ticket_counters(batch.args()[0].device)


@pytest.mark.parametrize("change", [
    dict(head_size=96), dict(head_size=256), dict(block_size=8), dict(block_size=544),
    dict(fp8=True, head_size=64), dict(sliding_window=37), dict(softcap=20.0), dict(sinks=True)])
def test_what_the_kernel_lacks_keeps_the_q_block_kernel(hopper, change):
    assert _kernels(_batch(**change)) == ["q_block_kernel"]


def test_an_fnuz_cache_keeps_the_q_block_kernel(hopper):
    """The kernel's Q K^T takes OCP e4m3 (Hopper's); FNUZ bytes are decoded in the Q-block kernel."""
    spec = BatchSpec((5, 300), (40, 700), num_q_heads=8, num_kv_heads=2, dtype="bfloat16", fp8_kv=True)
    assert _kernels(build_batch(spec, "cpu", fill=False, fp8_dtype=FNUZ_E4M3)) == ["q_block_kernel"]


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
import contextlib, io, json, os, re, subprocess, tempfile
os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"  # ptxas -v: the stack frame, where spills go
import triton
from kernels import VARIANTS, platform
from kernels.batch import BatchSpec, build_batch
from kernels.inputs import OCP_E4M3
from kernels.paged_attention.heuristics import Config
from perf.static import plan
from perf.thresholds import load_thresholds

platform.current = lambda: platform.Platform("nvidia", "sm_90", "H200", 32, 132)
SM90 = next(t for t in plan.load_targets(load_thresholds()) if t.name == "sm_90")


def tile_loops(cubin):
    # the SASS loops that issue wgmma (HGMMA, QGMMA) and store nothing to global memory: a consumer's tile
    # loop (a work item's loop, and the other ranges ptxas's block layout makes of it, also store the
    # output), each as its local-memory stores and loads (spills); cuobjdump from Triton's own wheel
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        sass = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, check=True).stdout
    code = [(int(a, 16), text) for a, text in re.findall(r"/\\*([0-9a-f]{4,})\\*/\\s+([^;]*);", sass)]
    index = {a: i for i, (a, _) in enumerate(code)}
    loops = []
    for i, (a, text) in enumerate(code):
        target = re.search(r"BRA .*0x([0-9a-f]+)", text)
        if target and int(target.group(1), 16) < a and int(target.group(1), 16) in index:
            first = index[int(target.group(1), 16)]
            body = [t for _, t in code[first:i + 1]]
            if any("GMMA" in t for t in body) and not any("STG" in t for t in body):
                loops.append(sum(("STL" in t) or ("LDL" in t) for t in body))
    return loops


facts = {}
# (head, block, e4m3 cache, q's e4m3 parts, query heads a KV head: token items, `Config.ws_token_items`,
# sequences: one makes the JIT take the batch's counts equal to 1 as constants, `Config.ws_pack_gqa`)
for head, block, fp8, parts, tokens, seqs, pack in (
        (128, 16, False, 1, 0, 2, False), (64, 128, False, 1, 0, 2, False), (128, 16, True, 1, 0, 2, False),
        (128, 16, True, 2, 0, 2, False), (128, 16, True, 2, 7, 2, False), (128, 16, True, 1, 16, 2, False),
        (128, 16, False, 1, 0, 1, False), (128, 16, True, 2, 7, 1, False), (128, 16, False, 1, 0, 2, True)):
    if tokens:  # a decode
        spec = BatchSpec((1, 1)[:seqs], (300, 700)[:seqs], num_q_heads=4 * tokens, num_kv_heads=4,
                         head_size=head, block_size=block, dtype="bfloat16", fp8_kv=fp8)
    else:
        spec = BatchSpec((5, 300)[:seqs], (40, 700)[:seqs], num_q_heads=8, num_kv_heads=2, head_size=head,
                         block_size=block, dtype="bfloat16", fp8_kv=fp8)
    batch = build_batch(spec, "cpu", fill=False, **({"fp8_dtype": OCP_E4M3} if fp8 else {}))
    config = Config(128, 128, 1, num_warps=8, num_stages=2, warp_specialized=True, qk_e4m3=parts == 1,
                    ws_token_items=bool(tokens), ws_pack_gqa=pack)
    _, [launch] = VARIANTS["static_grid"].plan(*batch.args(), out=batch.new_output(), vendor="nvidia",
                                               num_sms=132, config=config, **batch.options)
    # specialized as the launcher specializes it (ints equal to 1 as constants, alignments): an i32 signature
    # compiled a form whose launch of such a value failed in the GPU's compile (a lab knob, 2026-12-02)
    signature, constexprs, attrs, options = plan.bind(launch, SM90)
    log = io.StringIO()
    with contextlib.redirect_stdout(log):
        compiled = triton.compile(plan.source(launch.kernel, signature, constexprs, attrs),
                                  target=SM90.gpu_target(), options=options.__dict__)
    ptx = compiled.asm["ptx"]
    regs = [line.split() for line in ptx.splitlines() if "setmaxnreg" in line]
    facts[f"{head}/{block}" + ("/e4m3" if fp8 else "") + ("x2" if parts == 2 else "")
          + (f"/tokens{tokens}" if tokens else "") + ("/one" if seqs == 1 else "")
          + ("/packed" if pack else "")] = dict(
        shared=compiled.metadata.shared, num_warps=compiled.metadata.num_warps,
        setmaxnreg=sorted({r[0].split(".")[1] + " " + r[-1].rstrip(";") for r in regs}),
        wgmma=ptx.count("wgmma.mma_async"), tma=ptx.count("cp.async.bulk.tensor"),
        e4m3_wgmma=ptx.count("e4m3.e4m3"), conversions=ptx.count("cvt.rn.f16x2.e4m3x2"),
        adds={sem: ptx.count(f"atom.global.gpu.{sem}.add") for sem in ("relaxed", "acq_rel")},
        pack_shift=launch.args["pack_shift"],
        prefetches=ptx.count("prefetch.global.L1"),
        stack=int(m.group(1)) if (m := re.search(r"(\\d+) bytes stack frame", log.getvalue())) else 0,
        tile_loop_spills=tile_loops(compiled.asm["cubin"]))
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
    tokens = {shape: facts.pop(shape) for shape in list(facts) if "tokens" in shape}
    for shape, f in facts.items():
        e4m3 = "e4m3" in shape
        # 4 default + 4 + the loader's warpgroup, and for e4m3 the converter's before it
        assert f["num_warps"] == (16 if e4m3 else 12), (shape, f)
        assert f["shared"] <= 227 * 1024, (shape, f)  # an sm_90 SM's shared memory for one block
        regs, _ = ws.launch_constants(e4m3, q_parts=2 if "x2" in shape else 1)
        assert f"dec {regs['LOADER_REGS']}" in f["setmaxnreg"], (shape, f)  # the loader gives registers up
        assert f"inc {regs['CONSUMER_REGS']}" in f["setmaxnreg"], (shape, f)  # to the consumers
        assert not e4m3 or f"dec {regs['CONVERTER_REGS']}" in f["setmaxnreg"], (shape, f)
        assert f["tma"] > 0, (shape, f)
    # per consumer, Q K^T (head / 16 wgmma over 128 keys) and P V (128 / 16 over the head) twice each:
    # the first tile's Q K^T before the loop, the last tile's P V after it
    assert facts["128/16"]["wgmma"] == 2 * 2 * (128 // 16 + 128 // 16)
    assert facts["64/128"]["wgmma"] == 2 * 2 * (64 // 16 + 128 // 16)
    # e4m3: Q K^T on e4m3 (K of 32 a wgmma), P V in fp16 over V that the converter turns a pair at a time
    e4m3 = facts["128/16/e4m3"]
    assert e4m3["wgmma"] == 2 * 2 * (128 // 32 + 128 // 16) and e4m3["e4m3_wgmma"] == 2 * 2 * (128 // 32)
    assert e4m3["conversions"] > 0 and facts["128/16"]["conversions"] == 0
    # q in two e4m3 parts: twice Q K^T's e4m3 wgmma, P V as before
    two = facts["128/16/e4m3x2"]
    assert two["wgmma"] == 2 * 2 * (2 * 128 // 32 + 128 // 16)
    assert two["e4m3_wgmma"] == 2 * 2 * (2 * 128 // 32)
    # the loader's copy of the block of a sequence's last key through registers, compiled inside its tile
    # loop, spilled 72 B of stack for heads of 128 over blocks of 16 (and cost 1-5 % of a prefill's time);
    # compiled in the item's last tile alone (`_copy_kv`), 16 B, none of it in the loop; over e4m3 16 B
    # since a consumer with no rows of an item passes its stages on: values of the item, outside the tile
    # loop. Since the output is scaled by one reciprocal a row, 24 B for 128/16: values stored before the
    # partitions start, loaded once in them; no spill in any tile loop (sm_90 SASS, triton 3.6.0, 2026-12-01)
    # Compiled as the launcher binds it (its alignments known), 64/128 has none and two e4m3 parts 16 B, where
    # an i32 signature's compile took 8 B and 56 B (sm_90 SASS, triton 3.6.0, 2026-12-02). With q's second
    # descriptor and each item's packed rows (`Config.ws_pack_gqa`), 32 B for 128/16, packed or not: seven
    # words stored before the partitions start and loaded once in them (sm_90 SASS, triton 3.6.0, 2026-12-04)
    assert facts["128/16"]["stack"] <= 32 and facts["64/128"]["stack"] == 0 and e4m3["stack"] <= 16, facts
    assert two["stack"] <= 16 and facts["128/16/packed"]["stack"] <= 32, facts
    # packed: the same products, a query's group of 4 heads in 8 rows, and q's copies by TMA a box a query
    # (up to 16 of them) besides the Q-blocks' two
    packed, apart = facts["128/16/packed"], facts["128/16"]
    assert packed["pack_shift"] == 3 and apart["pack_shift"] == 0 and packed["wgmma"] == apart["wgmma"]
    assert packed["tma"] > apart["tma"], (packed, apart)
    # a batch of one sequence (its counts constants to the JIT): the same products, no more stack
    every = {**facts, **tokens}
    for one, same in (("128/16/one", "128/16"), ("128/16/e4m3x2/tokens7/one", "128/16/e4m3x2/tokens7")):
        f, g = every[one], every[same]
        products = ("wgmma", "e4m3_wgmma", "conversions")
        assert [f[k] for k in products] == [g[k] for k in products] and f["stack"] <= g["stack"], (one, f, g)
    # what the stack bounds stand for: both consumers' tile loops found, none spilling
    for shape, f in facts.items():
        spills = f["tile_loop_spills"]
        assert len(spills) == 2 and not any(spills), (shape, spills)
    # the loader's ticket draws relaxed (`_ticket`: acquire-release, each was a GPU-scope fence between two
    # tiles' copies), the program's count-out acquire-release (`_leave`), in every form
    for shape, f in {**facts, **tokens}.items():
        assert f["adds"]["relaxed"] >= 1 and f["adds"]["acq_rel"] == 1, (shape, f["adds"])
    # token items (a decode): the consumer's, the converter's and the loader's warpgroups, shared memory
    # within an SM's for the largest group taken (16 heads), and the products transposed: S^T on e4m3 (M 64
    # and K 32: a tile of 128 keys and a head of 128, 2 x 4 a part) and O^T in fp16 (M 64 and K 16: 2 x 8),
    # in the one consumer's tile loop, which spills nothing
    for shape, f in tokens.items():
        regs, _ = ws.launch_constants(True, q_parts=2 if "x2" in shape else 1, token_items=True)
        assert f["num_warps"] == 12 and f["shared"] <= 227 * 1024 and f["tma"] > 0, (shape, f)
        assert f"dec {regs['LOADER_REGS']}" in f["setmaxnreg"], (shape, f)
        assert f"inc {regs['CONVERTER_REGS']}" in f["setmaxnreg"], (shape, f)
        assert f["tile_loop_spills"] == [0] and f["stack"] == 0, (shape, f)
        assert f["prefetches"] == 2, (shape, f)  # the guessed sequence's length and block ids (`_token_item`)
    two, one = tokens["128/16/e4m3x2/tokens7"], tokens["128/16/e4m3/tokens16"]
    assert two["e4m3_wgmma"] == 2 * 2 * 4 and one["e4m3_wgmma"] == 2 * 4
    assert two["wgmma"] - two["e4m3_wgmma"] == one["wgmma"] - one["e4m3_wgmma"] == 2 * 8


# (query lens, kv lens) per batch: several Q-blocks per sequence with and without context before the
# queries, a decode and a partial Q-block beside them, a last cache block partly filled; a chunk of
# 129 queries after 334 keys; one long prompt of no multiple of the tile.
GPU_BATCHES = {
    "mixed": ((300, 1, 129, 17, 64), (300, 1328, 463, 17, 1000)),
    "chunk": ((129,), (463,)),
    "prompt_1000": ((1000,), (1000,)),
    # whole Q-blocks only: a gap in the numbering after every sequence, the last one trimmed
    "whole_blocks": ((256, 128, 384, 128), (1000, 128, 700, 2000)),
}
GPU_CASES = [
    ("mixed", 8, 2, 128, 16, "bfloat16", False),
    ("mixed", 10, 2, 128, 32, "float16", False),
    ("mixed", 8, 1, 64, 64, "bfloat16", False),
    ("chunk", 4, 4, 128, 128, "bfloat16", False),
    ("prompt_1000", 32, 8, 128, 16, "bfloat16", False),
    ("prompt_1000", 8, 2, 64, 128, "float16", False),
    ("whole_blocks", 8, 2, 128, 16, "bfloat16", False),
    # OCP e4m3 caches: Q K^T on e4m3, V converted to fp16 by the converter
    ("mixed", 8, 2, 128, 16, "bfloat16", True),
    ("mixed", 10, 2, 128, 32, "float16", True),
    ("chunk", 4, 4, 128, 128, "bfloat16", True),
    ("prompt_1000", 32, 8, 128, 64, "bfloat16", True),
    ("whole_blocks", 8, 2, 128, 16, "bfloat16", True),
]


def _on_sm90(device: str) -> None:
    if device == "cpu":
        pytest.skip("Gluon has no interpreter mode: the kernel runs on an sm_90 GPU only")
    if platform.current().arch != planning.WARP_SPECIALIZED_ARCH:
        pytest.skip(f"the kernel is sm_90's; this GPU is {platform.current().arch}")


# each e4m3 case twice: q rounded to one e4m3 part (against a reference of q so rounded), and in two
GPU_RUNS = ([case + ("",) for case in GPU_CASES if not case[-1]]
            + [case + (q,) for case in GPU_CASES if case[-1] for q in ("q in one part", "q in two parts")])


@pytest.mark.parametrize("name,q_heads,kv_heads,head_size,block_size,dtype,fp8,q_parts", GPU_RUNS)
def test_the_kernel_matches_the_reference(name, q_heads, kv_heads, head_size, block_size, dtype, fp8, q_parts,
                                          device):
    _on_sm90(device)
    # q in one part: by `qk_e4m3` under bf16 queries, by `ws_q_rounded` (the tree's) under fp16 ones
    config = (WS_ROUNDED if dtype == "bfloat16" else WS_Q_ROUNDED) if q_parts == "q in one part" else WS
    query_lens, kv_lens = GPU_BATCHES[name]
    spec = BatchSpec(query_lens, kv_lens, num_q_heads=q_heads, num_kv_heads=kv_heads, head_size=head_size,
                     block_size=block_size, dtype=dtype, fp8_kv=fp8,
                     seed=seed("warp_specialized", name, q_heads, head_size, block_size, fp8))
    batch = build_batch(spec, device, poison=True, **({"fp8_dtype": OCP_E4M3} if fp8 else {}))
    assert _kernels(batch, config, vendor=None) == ["ws_prefill_kernel"]
    out = batch.new_output()  # NaN: an unwritten element fails
    # as the check holds it: q in one e4m3 part against the reference of q so rounded, in two parts
    # (8 bits) against q itself, both to bf16's tolerance at least; over 16-bit caches the grid's
    expected, (atol, rtol) = planned_check(VARIANTS["static_grid"], batch, out, config=config)
    assert (atol, rtol) == TOLERANCES["bfloat16" if fp8 else dtype]
    VARIANTS["static_grid"](*batch.args(), out=out, config=config, **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol)


# `Config.ws_pack_gqa` (16-bit caches): decodes and sequences of few queries beside prompts, groups of 4, 5,
# 7, 16 and 64 heads (8, 8, 8, 16 and 64 rows a query: the group's heads, then the next group's, not stored),
# sequences that just fit 128 rows (16 x 8, 8 x 16, 2 x 64: both consumers' rows) and just do not (17, 9, 3:
# Q-blocks of one head), a key count of 1, of a partial last block and past a tile, every cache block size
PACK_CASES = [
    (28, 4, 128, 16, "bfloat16", (1, 300, 1, 16, 3, 17, 1), (1, 300, 4097, 200, 3, 1000, 129)),
    (40, 8, 128, 32, "float16", (2, 1, 129, 8, 1), (700, 33, 463, 8, 2000)),
    (32, 8, 64, 64, "bfloat16", (1, 1, 64, 1), (5000, 17, 64, 1)),
    (32, 2, 128, 128, "bfloat16", (8, 1, 9, 300), (130, 255, 9, 300)),
    (64, 1, 64, 16, "float16", (1, 2, 3), (100, 1000, 40)),
]


@pytest.mark.parametrize("q_heads,kv_heads,head_size,block_size,dtype,query_lens,kv_lens", PACK_CASES)
def test_pack_gqa_matches_the_reference(q_heads, kv_heads, head_size, block_size, dtype, query_lens, kv_lens,
                                        device):
    """Each packed row stored at its own token and head, none past its group or its sequence's queries (the
    output poisoned: an unwritten element fails, a stray write lands on another head's row), and the gaps the
    packed items leave in the numbering drawn and counted out (the counters back at zero)."""
    _on_sm90(device)
    spec = BatchSpec(query_lens, kv_lens, num_q_heads=q_heads, num_kv_heads=kv_heads, head_size=head_size,
                     block_size=block_size, dtype=dtype,
                     seed=seed("warp_specialized_pack_gqa", q_heads, kv_heads, block_size, dtype))
    batch = build_batch(spec, device, poison=True)
    planning.release_buffers()
    _, [launch] = VARIANTS["static_grid"].plan(*batch.args(), out=batch.new_output(), config=WS_PACKED,
                                               **batch.options)
    assert launch.name == "ws_prefill_kernel" and launch.args["pack_shift"] > 0
    out = batch.new_output()
    expected, (atol, rtol) = planned_check(VARIANTS["static_grid"], batch, out, config=WS_PACKED)
    assert (atol, rtol) == TOLERANCES[dtype]
    VARIANTS["static_grid"](*batch.args(), out=out, config=WS_PACKED, **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol)
    assert planning.ticket_counters(device).tolist() == [0, 0]


@pytest.mark.parametrize("dtype,fp8", [("bfloat16", False), ("bfloat16", True), ("float16", True)])
def test_the_trees_prompt_is_the_kernel_on_sm90(dtype, fp8, device):
    """As a serving engine calls it: the NVIDIA tree's own choice for a prompt of 2k tokens, over a 16-bit
    cache or an OCP e4m3 one."""
    _on_sm90(device)
    spec = BatchSpec((2048,), (2048,), num_q_heads=32, num_kv_heads=8, dtype=dtype, fp8_kv=fp8, seed=7)
    batch = build_batch(spec, device, poison=True, **({"fp8_dtype": OCP_E4M3} if fp8 else {}))
    assert _kernels(batch, config=None, vendor=None) == ["ws_prefill_kernel"]
    out = batch.new_output()
    # the tree: q over e4m3 rounded to one part, against the reference of q so rounded
    expected, (atol, rtol) = planned_check(VARIANTS["static_grid"], batch, out)
    assert (atol, rtol) == TOLERANCES["bfloat16"]
    VARIANTS["static_grid"](*batch.args(), out=out, **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("queries,keys,q_heads,kv_heads,dtype,fp8", PROMPT_BATCHES)
def test_the_trees_batches_of_prompts_are_the_kernel_on_sm90(queries, keys, q_heads, kv_heads, dtype, fp8,
                                                             device):
    """[ws-short-prompts] and [ws-large-batches] as a serving engine calls them (the lengths hinted, as vLLM
    passes them): alike prompts, and decodes, chunks and whole prompts in one batch, of lengths no tile
    divides, poisoned, against the fp32 reference (over e4m3, of q rounded as the kernel rounds it:
    `perf.measure.check`)."""
    _on_sm90(device)
    spec = BatchSpec(queries, keys, num_q_heads=q_heads, num_kv_heads=kv_heads, dtype=dtype, fp8_kv=fp8,
                     seed=13)
    batch = build_batch(spec, device, poison=True, **({"fp8_dtype": OCP_E4M3} if fp8 else {}))
    hints = dict(max_seqlen_q=max(queries), max_seqlen_k=max(keys))
    assert _kernels(batch, config=None, vendor=None, **hints) == ["ws_prefill_kernel"]
    out = batch.new_output()
    expected, (atol, rtol) = planned_check(VARIANTS["static_grid"], batch, out, **hints)
    VARIANTS["static_grid"](*batch.args(), out=out, **hints, **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("corruption", ["keys_short_of_queries", "keys_past_the_row"])
def test_a_sequence_failing_keys_ok_gets_rows_of_zeros(corruption, fp8, device):
    """Metadata the value checks would refuse (they are off, as on the serving path): the sequence
    whose key count fails `common.keys_ok` gets rows of zeros, as from the Q-block kernel, and the
    other sequence of the batch its attention."""
    _on_sm90(device)
    spec = BatchSpec((300, 129), (300, 463), num_q_heads=8, num_kv_heads=2, dtype="bfloat16", fp8_kv=fp8,
                     seed=seed("warp_specialized_keys_ok", corruption))
    batch = build_batch(spec, device, poison=True, **({"fp8_dtype": OCP_E4M3} if fp8 else {}))
    q, k, v, table, cu_seqlens, seq_lens = batch.args()
    corrupt = seq_lens.clone()
    corrupt[0] = 299 if corruption == "keys_short_of_queries" else table.shape[1] * spec.block_size + 1
    out = batch.new_output()
    expected, (atol, rtol) = planned_check(VARIANTS["static_grid"], batch, out, config=WS)  # q in two parts
    VARIANTS["static_grid"](q, k, v, table, cu_seqlens, corrupt, out=out, config=WS, check_values=False,
                            **batch.options)
    assert torch.equal(out[:300].float(), torch.zeros_like(out[:300].float()))
    torch.testing.assert_close(out[300:].float(), expected[300:].float(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("fp8,config", [(False, WS), (True, WS), (False, WS_PACKED)])
def test_a_sequences_output_does_not_depend_on_its_batch(fp8, config, device):
    """A Q-block's 128 rows of q run past its sequence's last query into the next sequence's; those rows must
    not change its output. Over an e4m3 cache they would set the power of two q is rounded under (the next
    sequence's q here is 1000 times larger), so the output of the sequence alone and within the batch must
    be the same bits."""
    _on_sm90(device)
    spec = BatchSpec((100, 200, 3), (100, 300, 50), num_q_heads=8, num_kv_heads=2, dtype="bfloat16",
                     fp8_kv=fp8, seed=seed("warp_specialized_batch_invariance", fp8))
    batch = build_batch(spec, device, poison=True, **({"fp8_dtype": OCP_E4M3} if fp8 else {}))
    q, k, v, table, cu_seqlens, seq_lens = batch.args()
    q[100:] *= 1000
    assert _kernels(batch, vendor=None) == ["ws_prefill_kernel"]
    together = batch.new_output()
    VARIANTS["static_grid"](q, k, v, table, cu_seqlens, seq_lens, out=together, config=config,
                            **batch.options)
    alone = torch.full_like(together[:100], float("nan"))
    VARIANTS["static_grid"](q[:100], k, v, table[:1], cu_seqlens[:2], seq_lens[:1], out=alone, config=config,
                            **batch.options)
    assert torch.equal(together[:100], alone)
    # the last sequence's 3 queries (packed under `ws_pack_gqa`) alone, their rows at tokens 0-2
    last = torch.full_like(together[300:], float("nan"))
    VARIANTS["static_grid"](q[300:], k, v, table[2:], cu_seqlens[2:] - 300, seq_lens[2:], out=last,
                            config=config, **batch.options)
    assert torch.equal(together[300:], last)


@pytest.mark.parametrize("fp8", [False, True])
def test_the_tickets_start_from_zero_at_every_launch_and_replay(fp8, device):
    """The programs draw work items from two counters that the last program zeroes (`_leave`): a count left
    behind would skip items at the next launch, leaving its rows unwritten. Three eager calls and three
    replays of a captured graph, each into a poisoned output, over more items than SMs and items of unequal
    work; the counters read zero after each."""
    _on_sm90(device)
    spec = BatchSpec((1000, 700, 1), (1000, 900, 1500), num_q_heads=32, num_kv_heads=8, dtype="bfloat16",
                     fp8_kv=fp8, seed=seed("warp_specialized_tickets", fp8))
    batch = build_batch(spec, device, poison=True, **({"fp8_dtype": OCP_E4M3} if fp8 else {}))
    planning.release_buffers()
    _, [launch] = VARIANTS["static_grid"].plan(*batch.args(), out=batch.new_output(), config=WS,
                                               **batch.options)
    assert launch.name == "ws_prefill_kernel"
    assert launch.args["num_q_blocks"] * launch.args["num_q_heads"] > 2 * launch.grid[0]
    tickets = planning.ticket_counters(device)
    out = batch.new_output()
    expected, (atol, rtol) = planned_check(VARIANTS["static_grid"], batch, out, config=WS)  # q in two parts

    def call():
        VARIANTS["static_grid"](*batch.args(), out=out, config=WS, **batch.options)

    for _ in range(3):
        out.fill_(float("nan"))
        call()
        torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol)
        assert tickets.tolist() == [0, 0]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for _ in range(3):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol)
        assert tickets.tolist() == [0, 0]


# `Config.ws_token_items`: a decode over an OCP e4m3 cache, a work item per (token, KV head) whose rows are
# the KV head's query heads
WS_TOKENS = dataclasses.replace(WS, ws_token_items=True)
WS_TOKENS_ROUNDED = dataclasses.replace(WS_TOKENS, qk_e4m3=True)


def _decode(group=7, block_size=16, dtype="bfloat16", query_lens=(1, 1, 1), kv_lens=(300, 1, 4097), **spec):
    spec = BatchSpec(query_lens, kv_lens, num_q_heads=2 * group, num_kv_heads=2, head_size=128,
                     block_size=block_size, dtype=dtype, fp8_kv=True, **spec)
    return build_batch(spec, "cpu", fill=False, fp8_dtype=OCP_E4M3)


@pytest.mark.parametrize("num_sms", [132, 3])
def test_token_items_plan_a_program_per_item_up_to_the_sms(hopper, num_sms):
    batch = _decode()
    planning.release_buffers()
    _, [launch] = VARIANTS["static_grid"].plan(*batch.args(), out=batch.new_output(), config=WS_TOKENS,
                                               vendor="nvidia", num_sms=num_sms, **batch.options)
    assert launch.name == "ws_prefill_kernel" and launch.constexprs["TOKEN_ITEMS"]
    assert launch.grid == (min(3 * 2, num_sms),)  # tokens x KV heads
    assert launch.constexprs["Q_PARTS"] == 2 and not check.rounds_q_to_e4m3([launch.config()])
    plan = planning.WarpSpecializedPlan(batch.q, batch.k_cache, batch.args()[3], batch.options, 132,
                                        WS_TOKENS)
    q_desc = plan.launches(*batch.args(), batch.new_output(), batch.options)[0].args["q_desc"]
    assert list(q_desc.shape) == [3 * 14, 128] and list(q_desc.block_shape) == [8, 128]  # 7 heads: 8 rows


@pytest.mark.parametrize("change", [dict(fp8=False), dict(group=17), dict(padded_tokens=True)])
def test_what_token_items_lack_keeps_the_q_block_kernel(hopper, change):
    """A 16-bit cache (the kernel's token items are written for e4m3), a group of more query heads than
    the kernel's shared memory holds (`warp_specialized.TOKEN_MAX_GROUP`), and q's tokens apart (its rows are
    one TMA tensor of tokens x heads)."""
    if change.get("fp8") is False:
        spec = BatchSpec((1, 1), (300, 17), num_q_heads=14, num_kv_heads=2, dtype="bfloat16")
        batch = build_batch(spec, "cpu", fill=False)
    else:
        batch = _decode(group=change.get("group", 7))
    q, *rest = batch.args()
    if change.get("padded_tokens"):
        q = torch.empty(q.shape[0], q.shape[1] + 2, q.shape[2], dtype=q.dtype)[:, :q.shape[1]]
    planning.release_buffers()
    _, launches = VARIANTS["static_grid"].plan(q, *rest, out=torch.empty_like(batch.q), config=WS_TOKENS,
                                               vendor="nvidia", num_sms=132, **batch.options)
    assert [x.name for x in launches] == ["q_block_kernel"]


# decodes over e4m3: groups of 4, 5, 7 and 8 query heads (the group's 64 rows hold the next group's heads
# after its own), contexts of 1 key, of a partial last block and past a tile, every cache block size the
# kernel takes, and sequences of several queries (each token its own item, at its own position)
TOKEN_CASES = [
    (7, 16, "bfloat16", (1, 1, 1), (300, 1, 4097)),
    (5, 32, "float16", (1, 1, 1, 1), (129, 2000, 17, 640)),
    (4, 64, "bfloat16", (1, 3, 1), (1000, 40, 128)),
    (8, 128, "bfloat16", (1, 1), (255, 3000)),
    (16, 16, "bfloat16", (1, 1, 1), (2048, 5, 129)),
    (7, 16, "float16", (2, 1, 4), (700, 33, 130)),
]


@pytest.mark.parametrize("q_parts", ["q in one part", "q in two parts"])
@pytest.mark.parametrize("group,block_size,dtype,query_lens,kv_lens", TOKEN_CASES)
def test_token_items_match_the_reference(group, block_size, dtype, query_lens, kv_lens, q_parts, device):
    _on_sm90(device)
    config = WS_TOKENS_ROUNDED if q_parts == "q in one part" else WS_TOKENS
    spec = BatchSpec(query_lens, kv_lens, num_q_heads=2 * group, num_kv_heads=2, head_size=128,
                     block_size=block_size, dtype=dtype, fp8_kv=True,
                     seed=seed("warp_specialized_tokens", group, block_size, dtype, len(kv_lens)))
    batch = build_batch(spec, device, poison=True, fp8_dtype=OCP_E4M3)
    assert _kernels(batch, config, vendor=None) == ["ws_prefill_kernel"]
    out = batch.new_output()  # NaN: an unwritten element fails
    expected, (atol, rtol) = planned_check(VARIANTS["static_grid"], batch, out, config=config)
    VARIANTS["static_grid"](*batch.args(), out=out, config=config, **batch.options)
    torch.testing.assert_close(out.float(), expected.float(), atol=atol, rtol=rtol)


def test_token_items_give_a_sequence_failing_keys_ok_rows_of_zeros_and_leave_the_tickets_at_zero(device):
    """A sequence whose keys fall short of its queries gets rows of zeros, the others their attention; a
    captured graph replays it, the counters back at zero after each launch."""
    _on_sm90(device)
    spec = BatchSpec((1, 2, 1), (300, 463, 90), num_q_heads=14, num_kv_heads=2, dtype="bfloat16", fp8_kv=True,
                     seed=seed("warp_specialized_tokens_keys_ok"))
    batch = build_batch(spec, device, poison=True, fp8_dtype=OCP_E4M3)
    q, k, v, table, cu_seqlens, seq_lens = batch.args()
    expected, (atol, rtol) = planned_check(VARIANTS["static_grid"], batch, batch.new_output(),
                                           config=WS_TOKENS)
    corrupt = seq_lens.clone()
    corrupt[1] = 1  # two queries over one key
    out = batch.new_output()

    def call():
        VARIANTS["static_grid"](q, k, v, table, cu_seqlens, corrupt, out=out, config=WS_TOKENS,
                                check_values=False, **batch.options)

    call()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for _ in range(2):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out[1:3].float(), torch.zeros_like(out[1:3].float()))
        torch.testing.assert_close(out[[0, 3]].float(), expected[[0, 3]].float(), atol=atol, rtol=rtol)
        assert planning.ticket_counters(device).tolist() == [0, 0]

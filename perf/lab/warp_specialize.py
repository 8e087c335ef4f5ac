"""Lab: does Triton's automatic warp specialization pay on a paged attention loop (sm_90)?

    python -m perf.lab.warp_specialize [--keys 8192] [--blocks 16,64,128] [--samples 25] [--allow-cpu]

A lab tool, not a gate. The paged kernel cannot be warp-specialized as it is written
(docs/lab/2026-11-27.md, "Warp specialization on sm_90": 8 warps, else blocks, a while loop, K/V
gathered by pointer); before anyone rewrites it, this times the loop that Triton *can*
specialize against the same loop without it. `paged_loop` is the unmasked middle of a
prefill: a Q-block of one query head over every key of one sequence (no causal mask: every
tile is seen whole), llama3-8b's heads (32 query heads on 8 KV heads, head 128, bf16), a
paged cache of `--blocks` keys per block in shuffled order, one cache block per tile, its
id read from the block table. Per block size, four configurations:

| name | K/V read | warps | warp-specialized |
|---|---|---|---|
| pointers | through pointer tensors (what `common.attend_tiles` does) | 8 | no |
| descriptors/8 | TMA descriptors made on the device | 8 | no |
| descriptors/4 | the same | 4 | no |
| specialized | the same, `tl.range(..., warp_specialize=True)` | 4 (12 with the partitions) | yes |

Tile 128 runs 2 stages (3 with the partitions need 256 KiB of shared memory, more than an
SM's 227; sm_90 compile, Triton 3.6.0), tile 64 runs 3. Beside them, on a GPU:

- `gluon`: the production's prefill warp-specialized by hand in Gluon
  (`kernels.paged_attention.warp_specialized`: a TMA loader warp, two consumer warpgroups of 64
  rows; tiles of 128 keys whatever the block size, 2 stages) with its causal mask off, over the
  same cache and table read as a one-sequence batch;
- `flashinfer`: FlashInfer's paged prefill (`BatchPrefillWithPagedKVCacheWrapper`, no mask; on
  sm_90 FA3's kernel) over the same cache and table.

Triton's rows need a block of a whole tile (64 or 128); Gluon's and FlashInfer's also take
the anchor's blocks of 16 (and 32). Every output is checked against an
fp32 reference first; a configuration that fails to compile or differs is reported with the
reason, never timed.
Times: one CUDA-graph replay, L2 flushed before each sample (`perf.measure.timing`), the
median in ms, and TFLOP/s (4 x queries x keys x head x query heads). Prints a table;
`--json FILE` writes the rows. With `--allow-cpu` it runs tiny shapes in Triton's
interpreter (checks only: the interpreter ignores `warp_specialize`; Gluon and FlashInfer do
not run there).
"""

from __future__ import annotations

import argparse
import dataclasses

if __name__ == "__main__":  # before Triton is imported: its interpreter where there is no GPU
    from perf.vendor import interpreter_without_gpu

    interpreter_without_gpu()

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from perf.errors import EXIT_OK, ConfigError  # noqa: E402

HEADS, KV_HEADS, HEAD = 32, 8, 128  # llama3-8b
BLOCK_M = 128  # a Q-block's rows, as the NVIDIA prefill's
SAMPLES = 25  # per configuration; unmeasured default, as perf run's
STAGES = {64: 3, 128: 2}  # tile -> stages: what fits in shared memory with the partitions (module docstring)
BLOCKS = (16, 32, 64, 128)  # cache block sizes the lab takes: those that divide Gluon's tile of 128
FLASHINFER_WORKSPACE_BYTES = 128 * 1024 * 1024  # flashinfer's documented default workspace


@triton.jit
def online_softmax_step(q, k_t, v, acc, m, s_sum):
    """One tile of `common.attend_tiles`' loop, seen whole: scores, exp2, rescale, P V."""
    s = tl.dot(q, k_t)
    m_new = tl.maximum(m, tl.max(s, 1))
    p = tl.exp2(s - m_new[:, None])
    alpha = tl.exp2(m - m_new)
    return acc * alpha[:, None] + tl.dot(p.to(v.dtype), v), m_new, s_sum * alpha + tl.sum(p, 1)


@triton.jit
def paged_loop(Q, K, V, O, BT, n_queries, n_blocks, kv_rows, scale,
               HEADS: tl.constexpr, GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               D: tl.constexpr, DESCRIPTORS: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    """Rows BLOCK_M * program_id(0).. of query head program_id(1) over the n_blocks cache blocks
    of BT. Q and O: [queries, HEADS * D]; K and V: [kv_rows, HEADS // GROUP * D] (the paged
    cache's [blocks, block, KV heads, D] as rows)."""
    head = tl.program_id(1)
    col = (head // GROUP) * D
    first = tl.program_id(0) * BLOCK_M
    rows = first + tl.arange(0, BLOCK_M)
    d = tl.arange(0, D)
    if DESCRIPTORS:  # made on the device (Triton's global scratch): what the pass accepts in 3.6 and 3.9
        q_desc = tl.make_tensor_descriptor(Q, shape=[n_queries, HEADS * D], strides=[HEADS * D, 1],
                                           block_shape=[BLOCK_M, D])
        k_desc = tl.make_tensor_descriptor(K, shape=[kv_rows, HEADS // GROUP * D],
                                           strides=[HEADS // GROUP * D, 1], block_shape=[BLOCK_N, D])
        v_desc = tl.make_tensor_descriptor(V, shape=[kv_rows, HEADS // GROUP * D],
                                           strides=[HEADS // GROUP * D, 1], block_shape=[BLOCK_N, D])
        q = q_desc.load([first, head * D])
    else:
        q = tl.load(Q + rows[:, None] * (HEADS * D) + head * D + d[None, :], mask=rows[:, None] < n_queries,
                    other=0.0)
    q = (q * (scale * 1.4426950408889634)).to(q.dtype)  # log2(e): the loop's exp2
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    s_sum = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for j in tl.range(0, n_blocks, warp_specialize=WARP_SPECIALIZE):
        block = tl.load(BT + j)
        if DESCRIPTORS:
            k = k_desc.load([block * BLOCK_N, col])
            v = v_desc.load([block * BLOCK_N, col])
        else:
            keys = block * BLOCK_N + tl.arange(0, BLOCK_N)
            k = tl.load(K + keys[:, None] * (HEADS // GROUP * D) + col + d[None, :])
            v = tl.load(V + keys[:, None] * (HEADS // GROUP * D) + col + d[None, :])
        acc, m, s_sum = online_softmax_step(q, k.T, v, acc, m, s_sum)
    out = (acc / s_sum[:, None]).to(O.dtype.element_ty)
    tl.store(O + rows[:, None] * (HEADS * D) + head * D + d[None, :], out, mask=rows[:, None] < n_queries)


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    descriptors: bool
    num_warps: int
    warp_specialize: bool
    kind: str = "triton"  # "triton" (paged_loop), "gluon" (ws_prefill_kernel), "flashinfer" (0: own warps)

    def takes(self, block: int) -> bool:
        """Triton's loop reads one cache block per tile, so only blocks of a tile it runs."""
        return self.kind != "triton" or block in STAGES


VARIANTS = (Variant("pointers", False, 8, False), Variant("descriptors/8", True, 8, False),
            Variant("descriptors/4", True, 4, False), Variant("specialized", True, 4, True),
            Variant("gluon", True, 12, True, "gluon"), Variant("flashinfer", False, 0, True, "flashinfer"))
INTERPRETED = tuple(v for v in VARIANTS if v.kind == "triton")  # Gluon and FlashInfer need a GPU


def make_inputs(keys: int, block: int, device: str, heads: int = HEADS, kv_heads: int = KV_HEADS,
                head: int = HEAD, seed: int = 0) -> dict:
    """One sequence of `keys` queries over `keys` keys in a paged cache of `block`-key blocks,
    the blocks in shuffled order (with a spare block on each side of the used ones)."""
    import torch

    if keys % block:
        raise ConfigError(f"--keys {keys}: not a multiple of the block size {block}; pass a multiple")
    dtype = torch.float16 if device == "cpu" else torch.bfloat16  # the interpreter has no bf16 constants
    g = torch.Generator().manual_seed(seed)
    n_blocks = keys // block
    cache_blocks = n_blocks + 2
    q = torch.randn(keys, heads * head, generator=g).to(dtype)
    k = torch.randn(cache_blocks * block, kv_heads * head, generator=g).to(dtype)
    v = torch.randn(cache_blocks * block, kv_heads * head, generator=g).to(dtype)
    table = (torch.randperm(n_blocks, generator=g) + 1).to(torch.int32)
    return {"q": q.to(device), "k": k.to(device), "v": v.to(device), "table": table.to(device),
            "keys": keys, "block": block, "heads": heads, "kv_heads": kv_heads, "head": head}


def reference(inputs: dict):
    """fp32 attention of every query over every key of the sequence (no mask)."""
    import torch

    heads, kv_heads, head, block = inputs["heads"], inputs["kv_heads"], inputs["head"], inputs["block"]
    table = inputs["table"].long()
    rows = (table[:, None] * block + torch.arange(block, device=table.device)).reshape(-1)

    def per_head(x, n):  # [positions, n * head] -> [heads, positions, head]
        return x.float().reshape(-1, n, head).transpose(0, 1).repeat_interleave(heads // n, 0)

    q = per_head(inputs["q"], heads)
    k, v = per_head(inputs["k"][rows], kv_heads), per_head(inputs["v"][rows], kv_heads)
    p = torch.softmax(q @ k.transpose(1, 2) / head**0.5, dim=-1)
    return (p @ v).transpose(0, 1).reshape(inputs["q"].shape)


def flashinfer_prefill(inputs: dict):
    """FlashInfer's paged prefill over the lab's cache and table, planned once (host work outside
    the timed call): a function of the output. Raises ConfigError where flashinfer is absent."""
    import torch

    try:
        import flashinfer
    except ImportError as exc:
        raise ConfigError(f"flashinfer does not import: {exc}") from exc
    keys, block, heads, kv_heads, head = (inputs[k] for k in ("keys", "block", "heads", "kv_heads", "head"))
    device = inputs["q"].device
    workspace = torch.zeros(FLASHINFER_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")
    wrapper.plan(torch.tensor([0, keys], dtype=torch.int32, device=device),
                 torch.tensor([0, keys // block], dtype=torch.int32, device=device), inputs["table"],
                 torch.tensor([block], dtype=torch.int32, device=device), heads, kv_heads, head, block,
                 causal=False, sm_scale=head ** -0.5, q_data_type=inputs["q"].dtype,
                 kv_data_type=inputs["k"].dtype)
    q = inputs["q"].view(keys, heads, head)
    cache = (inputs["k"].view(-1, block, kv_heads, head), inputs["v"].view(-1, block, kv_heads, head))

    def run(out, keep=workspace):
        wrapper.run(q, cache, out=out.view(keys, heads, head))
    return run


def gluon_prefill(inputs: dict):
    """The production's warp-specialized prefill over the lab's cache and table, as one sequence of
    `keys` queries with its causal mask off (`ws_prefill_kernel`'s CAUSAL), planned once: a function
    of the output."""
    import torch

    from kernels.paged_attention import planning, warp_specialized

    keys, block, heads, kv_heads, head = (inputs[k] for k in ("keys", "block", "heads", "kv_heads", "head"))
    if head not in warp_specialized.HEAD_SIZES or block not in warp_specialized.BLOCK_SIZES:
        raise ConfigError(f"the warp-specialized kernel takes heads of {warp_specialized.HEAD_SIZES} and "
                          f"blocks of {warp_specialized.BLOCK_SIZES}")
    device = inputs["q"].device
    q = inputs["q"].view(keys, heads, head)
    k, v = (inputs[name].view(-1, block, kv_heads, head) for name in ("k", "v"))
    table = inputs["table"].view(1, -1)
    cu_seqlens = torch.tensor([0, keys], dtype=torch.int32, device=device)
    seq_lens = torch.tensor([keys], dtype=torch.int32, device=device)
    plan = planning.WarpSpecializedPlan(q, k, table, {})

    def run(out):
        [attention] = plan.launches(q, k, v, table, cu_seqlens, seq_lens, out.view(keys, heads, head), {})
        attention.constexprs = {**attention.constexprs, "CAUSAL": False}
        attention()
    return run


def launch(variant: Variant, inputs: dict, out, block_m: int = BLOCK_M):
    """One call of `variant` (its FlashInfer plan made once per inputs)."""
    if variant.kind == "gluon":
        if "gluon" not in inputs:
            inputs["gluon"] = gluon_prefill(inputs)
        return inputs["gluon"](out)
    if variant.kind == "flashinfer":
        if "flashinfer" not in inputs:
            inputs["flashinfer"] = flashinfer_prefill(inputs)
        return inputs["flashinfer"](out)
    grid = (triton.cdiv(inputs["keys"], block_m), inputs["heads"])
    paged_loop[grid](inputs["q"], inputs["k"], inputs["v"], out, inputs["table"], inputs["keys"],
                     inputs["keys"] // inputs["block"], inputs["k"].shape[0], inputs["head"] ** -0.5,
                     HEADS=inputs["heads"], GROUP=inputs["heads"] // inputs["kv_heads"], BLOCK_M=block_m,
                     BLOCK_N=inputs["block"], D=inputs["head"], DESCRIPTORS=variant.descriptors,
                     WARP_SPECIALIZE=variant.warp_specialize, num_warps=variant.num_warps,
                     num_stages=STAGES[inputs["block"]])


def _allocator(device: str) -> None:
    """Device-made descriptors live in Triton's global scratch: a torch allocation per launch
    (inside a CUDA graph, the graph's own pool)."""
    import torch

    def alloc(size: int, alignment: int, stream):
        return torch.empty(size, dtype=torch.int8, device=device)

    triton.set_allocator(alloc)


def measure(keys: int, blocks: list[int], samples: int, device: str, block_m: int = BLOCK_M,
            heads: int = HEADS, kv_heads: int = KV_HEADS, head: int = HEAD) -> list[dict]:
    """A row per (block size, variant that takes it): checked against the reference, then timed
    on a GPU. On a CPU only Triton's rows (the interpreter)."""
    import torch

    _allocator(device)
    rows = []
    for block in blocks:
        inputs = make_inputs(keys, block, device, heads, kv_heads, head)
        expected = reference(inputs)
        # bf16 output: its rounding, relative to the output's size (near-uniform attention over
        # thousands of keys averages V down to about 1 / sqrt(keys))
        scale = float(expected.abs().max())
        for variant in VARIANTS if device != "cpu" else INTERPRETED:
            if not variant.takes(block):
                continue
            row = {"block": block, "variant": variant.name, "num_warps": variant.num_warps,
                   "stages": _stages(variant, block), "ms": None, "tflops": None, "error": ""}
            out = torch.full_like(inputs["q"], float("nan"))  # poisoned: a row it leaves unwritten fails
            try:
                launch(variant, inputs, out, block_m)
                torch.testing.assert_close(out.float(), expected, atol=2e-2 * scale, rtol=2e-2)
            except AssertionError:
                row["error"] = "output differs from the fp32 reference: " + mismatch(
                    out, expected, 2e-2 * scale, 2e-2, block_m, inputs["head"])
            except Exception as e:  # out of resources, refused by the compiler: reported, never timed
                row["error"] = f"{type(e).__name__}: {e}".strip().splitlines()[-1][:200]
            if not row["error"] and device != "cpu":
                from perf.measure import timing

                ms = timing.time_graph(lambda v=variant, i=inputs, o=out: launch(v, i, o, block_m),
                                       samples=samples).median
                row["ms"], row["tflops"] = ms, 4 * keys * keys * head * heads / ms / 1e9
            rows.append(row)
    return rows


def mismatch(out, expected, atol: float, rtol: float, block_m: int, head: int) -> str:
    """Where a wrong output is wrong, in one line: how much of it, by how much, and in which half of
    the Q-block's rows and which heads (a warp-specialized loop gives each consumer half the rows)."""
    import torch

    got = out.float()
    off = ~torch.isclose(got, expected, atol=atol, rtol=rtol) | ~torch.isfinite(got)
    rows = torch.arange(got.shape[0], device=got.device) % block_m < block_m // 2
    first, second = off[rows].float().mean().item(), off[~rows].float().mean().item()
    heads = off.reshape(got.shape[0], -1, head).any(dim=2).any(dim=0).nonzero().flatten().tolist()
    err = (got - expected).abs().nan_to_num(float("inf"), posinf=float("inf")).max().item()
    return (f"{off.float().mean().item():.1%} of elements off, max error {err:.3g} (output scale "
            f"{expected.abs().max().item():.3g}), {int((~torch.isfinite(got)).sum())} not finite; "
            f"off in the Q-block's first half of rows {first:.1%}, second half {second:.1%}; "
            f"heads off: {len(heads)} of {got.shape[1] // head}")


def _stages(variant: Variant, block: int) -> str:
    if variant.kind == "gluon":
        from kernels.paged_attention import warp_specialized

        return str(warp_specialized.STAGES)
    return str(STAGES[block]) if variant.kind == "triton" else "-"


def table(rows: list[dict]) -> str:
    lines = ["| block | variant | warps | stages | ms | TFLOP/s | / descriptors/8 | / flashinfer |",
             "|---|---|---|---|---|---|---|---|"]

    def ratio(r, base):
        ms = {x["block"]: x["ms"] for x in rows if x["variant"] == base and x["ms"]}
        return f"{r['ms'] / ms[r['block']]:.3f}" if r["ms"] and r["block"] in ms else "-"
    for r in rows:
        timed = (f"{r['ms']:.3f} | {r['tflops']:.0f}" if r["ms"] else
                 f"{r['error'] or 'checked, not timed (interpreter)'} | -")
        lines.append(f"| {r['block']} | {r['variant']} | {r['num_warps'] or '-'} | {r['stages']} | {timed} "
                     f"| {ratio(r, 'descriptors/8')} | {ratio(r, 'flashinfer')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perf.lab.warp_specialize",
                                description=__doc__.splitlines()[0])
    p.add_argument("--keys", type=int, default=8192, help="queries and keys of the sequence (default: 8192)")
    p.add_argument("--blocks", default="16,64,128",
                   help="cache block sizes, comma-separated, of 16, 32, 64, 128 (Triton's rows: 64 and 128)")
    p.add_argument("--samples", type=int, default=SAMPLES,
                   help=f"timed replays a configuration (default: {SAMPLES})")
    p.add_argument("--json", default=None, metavar="FILE", help="also write the rows as JSON")
    p.add_argument("--allow-cpu", action="store_true",
                   help="without a GPU, check tiny shapes in Triton's interpreter (nothing timed)")
    args = p.parse_args(argv)
    try:
        blocks = [int(b) for b in args.blocks.split(",") if b.strip()]
    except ValueError:
        blocks = []
    if not blocks or any(b not in BLOCKS for b in blocks):
        raise ConfigError(f"--blocks {args.blocks!r}: pass some of {', '.join(map(str, BLOCKS))}")
    if args.keys < 1 or args.samples < 1:
        raise ConfigError("--keys and --samples: must be positive")
    from perf import files, vendor

    if args.json:
        files.check_output(args.json, "--json")
    if vendor.require_gpu("the warp specialization lab", cpu_ok=args.allow_cpu, allow="--allow-cpu"):
        import torch

        major, minor = torch.cuda.get_device_capability()
        if torch.version.hip or (major, minor) != (9, 0):
            raise ConfigError(f"this GPU is not sm_90 ({torch.cuda.get_device_name()}): the lab measures "
                              f"Hopper's warp specialization; run it on an H100 or H200")
        rows = measure(args.keys, blocks, args.samples, "cuda")
    else:  # the interpreter: tiny shapes, every Triton row checked
        blocks = [b for b in blocks if b in STAGES] or sorted(STAGES)
        args.keys = 2 * max(blocks)
        rows = measure(args.keys, blocks, args.samples, "cpu", block_m=16, heads=4, kv_heads=2, head=16)
    print(table(rows), flush=True)
    if args.json:
        files.write_json(args.json, {"keys": args.keys, "triton": triton.__version__, "rows": rows})
    return EXIT_OK


if __name__ == "__main__":
    from perf.process import entry

    entry(main)

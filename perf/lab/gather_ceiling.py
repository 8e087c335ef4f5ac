"""Lab: how fast can the paged K/V cache be read at all, in the kernels' own access pattern?

    python -m perf.lab.gather_ceiling [SCENARIO ...] [--samples 25] [--rounds 5] [--out DIR]

A lab tool, not a gate. The copy-bandwidth roofline (perf/roofline.py) is a contiguous
device-to-device copy; a decode reads the engine's paged layout instead ([blocks, block size,
KV heads, head]: one KV head's key is one row of head x itemsize bytes, its next key a row of
KV heads x that further on). Where an attention kernel stays below the roofline, this tells
whether the layout or the kernel sets the ceiling: `read_kv_kernel` reads every K and V byte a
decode reads, in the same order (one program per sequence and KV head, tiles of keys looked up
through the block table) and adds them up (so nothing is skipped), and nothing else. Beside it:
the production entry (static_grid, the heuristics' configuration) on the same batch, as many
bytes read from contiguous buffers in [sequence, KV head, key, head] order (`PAGED` off), and
the copy bandwidth, all timed in one process (perf/measure/timing.py: CUDA-graph replay, L2
flushed before every sample), the rounds in a shuffled order. Prints a table and writes
DIR/gather_ceiling.json and .md.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics

import triton
import triton.language as tl

DECODES = ["llama3-8b/decode/batch64-kv4096/block32/fp8/bf16",
           "llama3-8b/decode/batch32-kv8192/block16/fp8/bf16", "llama3-8b/decode/batch32-kv8192/block16/bf16"]
TILES = (64, 128, 256)  # keys per program iteration; unmeasured: the kernels use 64-128
WARPS = (4, 8)


@triton.jit
def read_kv_kernel(k_ptr, v_ptr, bt_ptr, lens_ptr, out_ptr, stride_block, stride_pos, stride_head, stride_bt,
                   num_kv_heads, BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr, HEAD: tl.constexpr,
                   PAGED: tl.constexpr):
    """Program (sequence, KV head): the sum of its K and V bytes, tile by tile. PAGED: keys
    through the block table (one id per key, as the kernels' gather over blocks smaller than a
    tile); else one contiguous run per program ([sequence, KV head, key, head], stride_block
    apart: the dense reader)."""
    seq = tl.program_id(0) // num_kv_heads
    head = tl.program_id(0) % num_kv_heads
    n = tl.load(lens_ptr + seq)
    keys = tl.arange(0, TILE)
    dims = tl.arange(0, HEAD)
    acc = tl.zeros([TILE, HEAD], tl.int32)
    for t in range(0, tl.cdiv(n, TILE)):
        pos = t * TILE + keys
        ok = pos < n
        if PAGED:
            block = tl.load(bt_ptr + seq * stride_bt + pos // BLOCK_SIZE, mask=ok, other=0)
            row = block * stride_block + (pos % BLOCK_SIZE) * stride_pos + head * stride_head
        else:
            row = tl.program_id(0).to(tl.int64) * stride_block + pos * HEAD
        k = tl.load(k_ptr + row[:, None] + dims[None, :], mask=ok[:, None], other=0)
        v = tl.load(v_ptr + row[:, None] + dims[None, :], mask=ok[:, None], other=0)
        acc += k.to(tl.int32) + v.to(tl.int32)
    tl.store(out_ptr + tl.program_id(0), tl.sum(tl.sum(acc, axis=1), axis=0))


def _ints(cache):
    """The cache's bytes as integers of its width (fp8 -> uint8, 16-bit -> int16): summed, not converted."""
    import torch

    return cache.view(torch.uint8 if cache.element_size() == 1 else torch.int16)


def candidates(name: str) -> dict:
    """label -> callable over one scenario's batch, and the bytes a decode must read."""
    import torch

    from kernels import VARIANTS
    from kernels.batch import build_batch
    from perf import roofline, scenarios
    from perf.measure.cases import host_hints

    spec = scenarios.Scenario.parse(name).spec()
    batch = build_batch(spec, "cuda")
    k, v = _ints(batch.k_cache), _ints(batch.v_cache)
    num_blocks, block_size, heads, head = k.shape
    items = spec.num_seqs * heads
    sums = torch.empty(items, dtype=torch.int32, device="cuda")
    lens = batch.seq_lens
    longest = max(spec.kv_lens)
    # as many bytes per (sequence, KV head), contiguous; what they hold does not change a read
    dense_k = torch.zeros(spec.num_seqs, heads, longest, head, dtype=k.dtype, device="cuda")
    dense_v = torch.zeros_like(dense_k)
    out = batch.new_output()
    hints = host_hints(VARIANTS["static_grid"], spec)
    found = {"static_grid": lambda: VARIANTS["static_grid"](*batch.args(), out=out, **batch.options, **hints)}
    for tile in TILES:
        for warps in WARPS:
            found[f"paged t{tile} w{warps}"] = lambda tile=tile, warps=warps: read_kv_kernel[(items,)](
                k, v, batch.block_table, lens, sums, k.stride(0), k.stride(1), k.stride(2),
                batch.block_table.stride(0), heads, BLOCK_SIZE=block_size, TILE=tile, HEAD=head, PAGED=True,
                num_warps=warps)
            found[f"dense t{tile} w{warps}"] = lambda tile=tile, warps=warps: read_kv_kernel[(items,)](
                dense_k, dense_v, batch.block_table, lens, sums, longest * head, 0, 0, 0, heads,
                BLOCK_SIZE=block_size, TILE=tile, HEAD=head, PAGED=False, num_warps=warps)
    return found, roofline.kv_read_bytes(spec), spec


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perf.lab.gather_ceiling", description=__doc__.split("\n")[0])
    p.add_argument("scenarios", nargs="*", default=DECODES)
    p.add_argument("--samples", type=int, default=25)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default=os.path.join("results", "gather_ceiling"))
    args = p.parse_args(argv)
    from perf import files, roofline, vendor
    from perf.errors import ConfigError
    from perf.measure import timing

    if not vendor.on_gpu():
        raise ConfigError("python -m perf.lab.gather_ceiling: no GPU visible to torch; it reads a GPU's "
                          "memory")
    files.check_output(args.out, "--out", directory=True)
    import torch

    limits = roofline.measure_limits("cuda")
    rows = {}
    rng = random.Random(0)
    for name in args.scenarios:
        found, kv_bytes, spec = candidates(name)
        graphs = {label: timing.capture_graph(fn) for label, fn in found.items()}
        times: dict[str, list[float]] = {label: [] for label in found}
        for _ in range(args.rounds):
            order = list(found)
            rng.shuffle(order)
            for label in order:
                times[label].append(timing.time_graph(found[label], samples=args.samples,
                                                      graph=graphs[label]).median)
        ms = {label: statistics.median(t) for label, t in times.items()}
        rows[name] = {"ms": ms, "kv_bytes": kv_bytes, "limit_ms": roofline.limit_ms(spec, limits)}
        ranked = sorted(ms.items(), key=lambda x: x[1])
        print(f"gather_ceiling {name}: " + ", ".join(f"{k} {v:.4f}" for k, v in ranked), flush=True)
        del graphs, found
        torch.cuda.empty_cache()
    doc = {"gpu": torch.cuda.get_device_name(), "limits": {"copy_tb_s": limits.copy_tb_s}, "rows": rows}
    lines = [f"K/V read ceiling on {doc['gpu']}: graph replay, L2 flushed, median of {args.rounds} rounds "
             f"(ms); copy bandwidth {limits.copy_tb_s:.2f} TB/s measured in the same run.", "",
             "| scenario | reader | ms | K/V TB/s | % of the copy roofline (case bytes) |",
             "|---|---|---|---|---|"]
    for name, r in rows.items():
        for label, t in sorted(r["ms"].items(), key=lambda x: x[1]):
            lines.append(f"| {name} | {label} | {t:.4f} | {r['kv_bytes'] / t / 1e9:.2f} | "
                         f"{100 * r['limit_ms'] / t:.0f} % |")
    files.write_json(os.path.join(args.out, "gather_ceiling.json"), doc)
    files.write_text(os.path.join(args.out, "gather_ceiling.md"), "\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    from perf.process import entry

    entry(main)

"""Lab: how fast can the paged K/V cache be read at all, in the kernels' own access pattern?

    python -m perf.lab.gather_ceiling [SCENARIO ...] [--segments 1,2,4,8] [--tiles 32,64,128]
        [--warps 4,8] [--stages 2,3,4] [--samples 25] [--rounds 5] [--out DIR]

A lab tool, not a gate. The copy-bandwidth roofline (perf/roofline.py) is a contiguous
device-to-device copy; a decode reads the engine's paged layout instead ([blocks, block size, KV
heads, head]: one KV head's key is one row of head x itemsize bytes, its next key a row of KV
heads x that further on). Where an attention kernel stays below the roofline, this tells whether
the layout or the kernel sets the ceiling: `read_kv_kernel` reads every K and V byte a decode
reads, in the same order (a program per segment of a (sequence, KV head) item, tiles of keys
looked up through the block table), as 32-bit words XORed together (nothing is skipped, and
little is done with them), and nothing else, over a grid of segments an item, tiles, warps and
pipeline stages. The stages matter most: on the 134 MB fp8 decodes (about one item per SM) a
program an item read at 85-87 % of the copy limit at 3 stages and 88 % at 4, and 8 segments in
tiles of 32 at 2 stages at 88-89 % (H200, 2026-12-02, docs/lab/2026-12-02.md; a reader adding
each byte as an integer ran about 1 us slower). Beside it: the production entry (static_grid,
the heuristics' configuration) on the same batch, as many bytes read from contiguous buffers in
[sequence, KV head, key, head] order (`PAGED` off), and the copy bandwidth, all timed in one
process (perf/measure/timing.py: CUDA-graph replay, L2 flushed before every sample), the rounds
in a shuffled order. Prints a table and writes DIR/gather_ceiling.json and .md.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import random
import statistics

import triton
import triton.language as tl

DECODES = ["llama3-8b/decode/batch64-kv4096/block32/fp8/bf16",
           "llama3-8b/decode/batch32-kv8192/block16/fp8/bf16", "llama3-8b/decode/batch32-kv8192/block16/bf16"]
# The grid timed by default (each a command-line option): what the kernels use (tiles of 64-128 keys,
# 4-8 warps, 2-4 stages, 1-8 segments an item) and the fastest of 120 grids on the 134 MB fp8 decodes
# (8 segments in tiles of 32, 4 warps, 2 stages; H200, 2026-12-02, docs/lab/2026-12-02.md).
SEGMENTS = (1, 2, 4, 8)
TILES = (32, 64, 128)
WARPS = (4, 8)
STAGES = (2, 3, 4)


@triton.jit
def read_kv_kernel(k_ptr, v_ptr, bt_ptr, lens_ptr, out_ptr, stride_block, stride_pos, stride_head, stride_bt,
                   num_kv_heads, num_items, seg_keys, BLOCK_SIZE: tl.constexpr, TILE: tl.constexpr,
                   WORDS: tl.constexpr, PAGED: tl.constexpr, STAGES: tl.constexpr):
    """Program (segment, item): the XOR of the K and V words (WORDS 32-bit words a key) of keys
    [segment * seg_keys, (segment + 1) * seg_keys) of item (sequence, KV head), tile by tile;
    programs are numbered item-major within a segment (program p: item p % num_items, segment
    p // num_items). PAGED: keys through the block table (one id per key, as the kernels' gather
    over blocks smaller than a tile); else one contiguous run per item ([sequence, KV head, key,
    head], stride_block apart: the dense reader)."""
    item = tl.program_id(0) % num_items
    seq = item // num_kv_heads
    head = item % num_kv_heads
    start = (tl.program_id(0) // num_items) * seg_keys
    end = tl.minimum(start + seg_keys, tl.load(lens_ptr + seq))
    keys = tl.arange(0, TILE)
    dims = tl.arange(0, WORDS)
    acc = tl.zeros([TILE, WORDS], tl.int32)
    for t in tl.range(start, end, TILE, num_stages=STAGES):
        pos = t + keys
        ok = pos < end
        if PAGED:
            block = tl.load(bt_ptr + seq * stride_bt + pos // BLOCK_SIZE, mask=ok, other=0)
            row = block * stride_block + (pos % BLOCK_SIZE) * stride_pos + head * stride_head
        else:
            row = item.to(tl.int64) * stride_block + pos * WORDS
        k = tl.load(k_ptr + row[:, None] + dims[None, :], mask=ok[:, None], other=0)
        v = tl.load(v_ptr + row[:, None] + dims[None, :], mask=ok[:, None], other=0)
        acc ^= k ^ v
    tl.store(out_ptr + tl.program_id(0), tl.reduce(acc, None, _xor))


@triton.jit
def _xor(a, b):
    return a ^ b


def segment_keys(longest: int, segments: int, tile: int) -> int:
    """Keys a segment holds: the longest item in `segments` parts, rounded up to whole tiles."""
    return triton.cdiv(triton.cdiv(longest, segments), tile) * tile


def words(cache):
    """The cache's bytes as 32-bit words ([blocks, block size, KV heads, head x itemsize / 4]):
    read, never converted."""
    import torch

    return cache.view(torch.int32)


def candidates(name: str, segments=SEGMENTS, tiles=TILES, warps=WARPS, stages=STAGES) -> dict:
    """label -> callable over one scenario's batch, and the bytes a decode must read. The dense
    reader runs at 3 stages only, where 3 is among `stages` (the bound the paged grid is read
    against)."""
    import torch

    from kernels import VARIANTS
    from kernels.batch import build_batch
    from perf import roofline, scenarios
    from perf.measure.cases import host_hints

    spec = scenarios.Scenario.parse(name).spec()
    batch = build_batch(spec, "cuda")
    k, v = words(batch.k_cache), words(batch.v_cache)
    num_blocks, block_size, heads, row_words = k.shape
    items = spec.num_seqs * heads
    xors = torch.empty(items * max(segments), dtype=torch.int32, device="cuda")  # a program's XOR each
    lens = batch.seq_lens
    longest = max(spec.kv_lens)
    # as many bytes per (sequence, KV head), contiguous; what they hold does not change a read
    dense_k = torch.zeros(spec.num_seqs, heads, longest, row_words, dtype=k.dtype, device="cuda")
    dense_v = torch.zeros_like(dense_k)
    out = batch.new_output()
    hints = host_hints(VARIANTS["static_grid"], spec)
    found = {"static_grid": lambda: VARIANTS["static_grid"](*batch.args(), out=out, **batch.options, **hints)}
    table = batch.block_table
    paged = (k, v, table, lens, xors, k.stride(0), k.stride(1), k.stride(2), table.stride(0))
    dense = (dense_k, dense_v, table, lens, xors, longest * row_words, 0, 0, 0)
    for segs, tile, nw, ns in itertools.product(segments, tiles, warps, stages):
        seg_keys = segment_keys(longest, segs, tile)
        for label, args, is_paged in ((f"paged s{segs} t{tile} w{nw} st{ns}", paged, True),
                                      (f"dense s{segs} t{tile} w{nw} st{ns}", dense, False)):
            if is_paged or ns == 3:
                found[label] = functools.partial(
                    read_kv_kernel[(items * segs,)], *args, heads, items, seg_keys, BLOCK_SIZE=block_size,
                    TILE=tile, WORDS=row_words, PAGED=is_paged, STAGES=ns, num_warps=nw)
    return found, roofline.kv_read_bytes(spec), spec


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perf.lab.gather_ceiling", description=__doc__.split("\n")[0])
    p.add_argument("scenarios", nargs="*", default=DECODES)
    grid = (("--segments", SEGMENTS, "counts of segments an item"), ("--tiles", TILES, "tiles (keys)"),
            ("--warps", WARPS, "counts of warps a program"),
            ("--stages", STAGES, "counts of pipeline stages"))
    for flag, default, what in grid:
        p.add_argument(flag, default=",".join(map(str, default)), metavar="N,N",
                       help=f"the {what} to time, comma-separated (default %(default)s)")
    p.add_argument("--samples", type=int, default=25)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", default=os.path.join("results", "gather_ceiling"))
    args = p.parse_args(argv)
    from perf import files, lab, roofline, vendor
    from perf.errors import ConfigError

    grid_values = [lab.counts(getattr(args, flag[2:]), flag, what, ",".join(map(str, default)))
                   for flag, default, what in grid]
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
        found, kv_bytes, spec = candidates(name, *grid_values)
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

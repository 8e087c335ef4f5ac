"""Probe: does a TMA stream of the paged fp8 decode's bytes read faster when one program reads every KV head of a
cache block at once (its bytes contiguous in the [blocks, block, heads, dim] cache) than when each (sequence, KV
head) item is one program's? Programs a run: sequences x KV heads in every form, each with the same bytes:

- head: a program an item (sequence, KV head), a [BLOCK, D] box of its head's column a cache block (as today);
- page: a program a (sequence, key segment), the sequence's keys in `heads` segments; a stage's keys copied as
  `heads` [R, D] boxes, one a head, issued back to back, so a block's bytes are asked for together;
- page3d: as page, but one [R, heads, D] box a block (3D descriptor): a copy a block, not one a head;
- pair: a program a (sequence, pair of adjacent KV heads, half of the keys), a box a head, a block's two boxes
  issued back to back (256 adjacent bytes a key).

A loader warp copies into STAGES buffers of 128 rows of K and of V (32 KiB a stage in every form); the consumer
warpgroup waits on each, converts V to fp16 and sums it (its programs' sums add up to the cache's: every V byte
read once), then releases it. Run from the repository root on an sm_90 GPU; writes $OUT/page_probe.json."""
import itertools
import json
import os
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

ROWS = 128  # rows of D bytes a stage holds, of K and of V


@gluon.jit
def _loader(k_desc, v_desc, k_bufs, v_bufs, ready, empty, cfg, table_ptr, table_stride, out_ptr, kv_heads,
            keys, block_size, tiles):
    STAGES: gl.constexpr = k_bufs.type.shape[0]
    MODE: gl.constexpr = cfg.type.shape[0] - 1  # partitions see constexprs through shapes only
    HEADS: gl.constexpr = cfg.type.shape[1]
    R: gl.constexpr = k_desc.block_type.shape[0]
    D: gl.constexpr = 128
    p = gl.program_id(0)
    seq = p // kv_heads
    part = p % kv_heads
    table = table_ptr + seq.to(gl.int64) * table_stride
    if MODE == 0:
        col = part * D
        first = 0
        KEYS_A_TILE: gl.constexpr = ROWS_C
    else:  # HEADS heads read together: a group of them, its keys in HEADS segments
        col = (part // HEADS) * HEADS * D
        KEYS_A_TILE: gl.constexpr = ROWS_C // HEADS
        first = (part % HEADS) * (keys // HEADS)
    NBYTES: gl.constexpr = ROWS_C * D
    for t in range(tiles):
        stage = t % STAGES
        mbarrier.wait(empty.index(stage), ((t // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(stage), 2 * NBYTES)
        key0 = first + t * KEYS_A_TILE
        for i in gl.static_range(KEYS_A_TILE // R):
            key = key0 + i * R
            block = gl.load(table + key // block_size)
            row = block * block_size + key % block_size
            if MODE == 0:
                tma.async_copy_global_to_shared(k_desc, [row, col], ready.index(stage),
                                                k_bufs.index(stage).slice(i * R, R))
                tma.async_copy_global_to_shared(v_desc, [row, col], ready.index(stage),
                                                v_bufs.index(stage).slice(i * R, R))
            elif MODE != 2:
                for h in gl.static_range(HEADS):
                    tma.async_copy_global_to_shared(k_desc, [row, col + h * D], ready.index(stage),
                                                    k_bufs.index(stage).slice((i * HEADS + h) * R, R))
                for h in gl.static_range(HEADS):
                    tma.async_copy_global_to_shared(v_desc, [row, col + h * D], ready.index(stage),
                                                    v_bufs.index(stage).slice((i * HEADS + h) * R, R))
            else:
                tma.async_copy_global_to_shared(k_desc, [row, 0, 0], ready.index(stage),
                                                k_bufs.index(stage).slice(i * R, R))
                tma.async_copy_global_to_shared(v_desc, [row, 0, 0], ready.index(stage),
                                                v_bufs.index(stage).slice(i * R, R))


ROWS_C = gl.constexpr(ROWS)


@gluon.jit
def _consumer(k_desc, v_desc, k_bufs, v_bufs, ready, empty, cfg, table_ptr, table_stride, out_ptr, kv_heads,
              keys, block_size, tiles):
    STAGES: gl.constexpr = k_bufs.type.shape[0]
    MODE: gl.constexpr = cfg.type.shape[0] - 1
    HEADS: gl.constexpr = cfg.type.shape[1]
    if MODE == 2:
        layout: gl.constexpr = gl.BlockedLayout([1, 1, 16], [1, 4, 8], [4, 1, 1], [2, 1, 0])
        acc = gl.zeros([ROWS_C // HEADS, HEADS, 128], gl.float32, layout)
    else:
        layout: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0])
        acc = gl.zeros([ROWS_C, 128], gl.float32, layout)
    for t in range(tiles):
        stage = t % STAGES
        mbarrier.wait(ready.index(stage), (t // STAGES) & 1)
        v = v_bufs.index(stage).load(layout)
        acc += v.to(gl.float16).to(gl.float32)
        mbarrier.arrive(empty.index(stage), count=1)
    if MODE == 2:
        total = gl.sum(gl.sum(gl.sum(acc, 2), 1), 0)
    else:
        total = gl.sum(gl.sum(acc, 1), 0)
    gl.store(out_ptr + gl.program_id(0), total)


@gluon.jit
def page_kernel(k_desc, v_desc, table_ptr, table_stride, out_ptr, kv_heads, keys, block_size, tiles,
                STAGES: gl.constexpr, MODE: gl.constexpr, HEADS: gl.constexpr):
    if MODE == 2:
        k_bufs = gl.allocate_shared_memory(k_desc.dtype, [STAGES, ROWS_C // HEADS, HEADS, 128], k_desc.layout)
        v_bufs = gl.allocate_shared_memory(v_desc.dtype, [STAGES, ROWS_C // HEADS, HEADS, 128], v_desc.layout)
    else:
        k_bufs = gl.allocate_shared_memory(k_desc.dtype, [STAGES, ROWS_C, 128], k_desc.layout)
        v_bufs = gl.allocate_shared_memory(v_desc.dtype, [STAGES, ROWS_C, 128], v_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    cfg = gl.allocate_shared_memory(gl.int8, [MODE + 1, HEADS], gl.SwizzledSharedLayout(1, 1, 1, [1, 0]))
    gl.thread_barrier()
    args = (k_desc, v_desc, k_bufs, v_bufs, ready, empty, cfg, table_ptr, table_stride, out_ptr, kv_heads, keys,
            block_size, tiles)
    gl.warp_specialize([(_consumer, args), (_loader, args)], [1], [48])


MODES = {"head": 0, "page": 1, "page3d": 2, "pair": 3}


def together(mode, heads):
    """KV heads a program reads of each cache block."""
    return {"head": 1, "pair": 2}.get(mode, heads)


def form(mode, heads, block, keys):
    """(R, TILES): rows a box, tiles a program."""
    g = together(mode, heads)
    keys_a_tile = ROWS // g
    return min(block, keys_a_tile), (keys // g) // keys_a_tile


def descs(k, v, mode, r):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    nb, bs, h, d = k.shape
    if mode == "page3d":
        lay = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=3)
        shape, strides, box = [nb * bs, h, d], [k.stride(1), k.stride(2), 1], [r, h, d]
    else:
        lay = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
        shape, strides, box = [nb * bs, h * d], [k.stride(1), 1], [r, d]
    return (TensorDescriptor(k, shape, strides, box, lay), TensorDescriptor(v, shape, strides, box, lay))


def launcher(k, v, table, out, mode, heads, keys, block, stages):
    r, tiles = form(mode, heads, block, keys)
    kd, vd = descs(k, v, mode, r)
    programs = table.shape[0] * heads
    return lambda: page_kernel[(programs,)](kd, vd, table, table.stride(0), out, heads, keys, block, tiles,
                                           STAGES=stages, MODE=MODES[mode], HEADS=together(mode, heads), num_warps=4)


def main():
    from perf import roofline
    from perf.measure import timing
    out_dir = os.environ.get("OUT", "/tmp")
    tag = sys.argv[1] if len(sys.argv) > 1 else "1"
    lim = roofline.measure_limits()
    rows = []
    stage_list = [int(x) for x in os.environ.get("STAGES", "3").split(",")]
    # qwen2.5-7b 32 x 4k (4 KV heads), llama3-8b 16 x 4k (8): 134 MB; llama3-8b 32 x 4k: 268 MB; 32 x 8k: 537 MB
    for seqs, keys, heads in ((32, 4096, 4), (16, 4096, 8), (32, 4096, 8), (32, 8192, 8)):
        for block in (16, 32):
            nb = seqs * keys // block
            torch.manual_seed(0)
            k = torch.randn(nb, block, heads, 128, device="cuda").to(torch.float8_e4m3fn)
            v = torch.randn(nb, block, heads, 128, device="cuda").abs().to(torch.float8_e4m3fn)
            v_sum = v.float().sum().item()
            table = torch.randperm(nb, device="cuda", dtype=torch.int32).view(seqs, keys // block).contiguous()
            out = torch.zeros(seqs * heads, device="cuda")
            nbytes = 2 * k.numel()
            for rnd, stages, mode in itertools.product(range(2), stage_list, MODES):
                try:
                    fn = launcher(k, v, table, out, mode, heads, keys, block, stages)
                    out.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    got = out.double().sum().item()
                    assert abs(got - v_sum) <= 1e-4 * v_sum, (got, v_sum)
                    ms = timing.time_graph(fn, samples=25).median
                except Exception as e:
                    print("failed", seqs, heads, block, mode, stages, repr(e)[:400], flush=True)
                    continue
                rec = dict(process=tag, round=rnd, seqs=seqs, keys=keys, kv_heads=heads, block=block, stages=stages,
                           mode=mode, us=ms * 1e3, pct=100 * nbytes / (lim.copy_tb_s * 1e12) / (ms * 1e-3))
                rows.append(rec)
                print(json.dumps(rec), flush=True)
                json.dump({"gpu": torch.cuda.get_device_name(), "copy_tb_s": lim.copy_tb_s, "rows": rows},
                          open(os.path.join(out_dir, f"page_probe_{tag}.json"), "w"), indent=1)
            del k, v


if __name__ == "__main__":
    main()

"""Probe: a warp-specialized stream of the paged fp8 decode's bytes, fed by cp.async from a loader
partition of LW warps, against the same stream fed by TMA (2026-12-01's probe), one program an item.
Each program = (sequence, KV head): the loader copies each tile of TILE keys of K and V into STAGES
buffers (cp.async 16 bytes a thread, rows looked up through the block table; the stage's barrier
completes when every loader thread's copies have landed: cp.async.mbarrier.arrive.noinc); the consumer
warpgroup waits on each stage and (TOUCH) converts V's tile to fp16 and sums it (CHECK: K's too),
then releases it. Run from the repository root on an sm_90 GPU; writes $OUT/cpasync_probe.json."""
import itertools
import json
import os

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import mbarrier



@gluon.jit
def _cp_loader(k_ptr, v_ptr, k_bufs, v_bufs, ready, empty, table_ptr, table_stride, out_ptr, kv_heads,
               tiles, SHIFT, TOUCH, CHECK):
    """Chunks of rows: each chunk's block ids read after the stage's wait, one copy a chunk."""
    STAGES: gl.constexpr = k_bufs.type.shape[0]
    TILE: gl.constexpr = k_bufs.type.shape[1]
    D: gl.constexpr = k_bufs.type.shape[2]
    NW: gl.constexpr = gl.num_warps()
    ROWS: gl.constexpr = 8 * ((NW + 1) // 2)  # a copy covers 4 rows a warp (8 lanes x 16 bytes a row), >= 8 (the swizzle)
    layout: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [NW, 1], [1, 0])
    rows = gl.arange(0, ROWS, gl.SliceLayout(1, layout))
    cols = gl.arange(0, D, gl.SliceLayout(0, layout))
    item = gl.program_id(0)
    seq = item // kv_heads
    head = item % kv_heads
    stride_key = kv_heads * D
    mask = (1 << SHIFT) - 1
    table = table_ptr + seq.to(gl.int64) * table_stride
    for t in range(tiles):
        stage = t % STAGES
        mbarrier.wait(empty.index(stage), ((t // STAGES) & 1) ^ 1)
        for i in gl.static_range(TILE // ROWS):
            key = t * TILE + i * ROWS + rows
            ids = gl.load(table + (key >> SHIFT))
            off = ((ids.to(gl.int64) << SHIFT) + (key & mask)) * stride_key + head * D
            ptrs = off[:, None] + cols[None, :]
            async_copy.async_copy_global_to_shared(k_bufs.index(stage).slice(i * ROWS, ROWS), k_ptr + ptrs)
            async_copy.async_copy_global_to_shared(v_bufs.index(stage).slice(i * ROWS, ROWS), v_ptr + ptrs)
        async_copy.mbarrier_arrive(ready.index(stage), increment_count=False)


@gluon.jit
def _cp_loader_whole(k_ptr, v_ptr, k_bufs, v_bufs, ready, empty, table_ptr, table_stride, out_ptr, kv_heads,
                     tiles, SHIFT, TOUCH, CHECK):
    """The whole tile at once: its block ids read (and its addresses made) before the stage's wait."""
    STAGES: gl.constexpr = k_bufs.type.shape[0]
    TILE: gl.constexpr = k_bufs.type.shape[1]
    D: gl.constexpr = k_bufs.type.shape[2]
    NW: gl.constexpr = gl.num_warps()
    layout: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [NW, 1], [1, 0])
    rows = gl.arange(0, TILE, gl.SliceLayout(1, layout))
    cols = gl.arange(0, D, gl.SliceLayout(0, layout))
    item = gl.program_id(0)
    seq = item // kv_heads
    head = item % kv_heads
    stride_key = kv_heads * D
    mask = (1 << SHIFT) - 1
    table = table_ptr + seq.to(gl.int64) * table_stride
    for t in range(tiles):
        stage = t % STAGES
        key = t * TILE + rows
        ids = gl.load(table + (key >> SHIFT))
        off = ((ids.to(gl.int64) << SHIFT) + (key & mask)) * stride_key + head * D
        ptrs = off[:, None] + cols[None, :]
        mbarrier.wait(empty.index(stage), ((t // STAGES) & 1) ^ 1)
        async_copy.async_copy_global_to_shared(k_bufs.index(stage), k_ptr + ptrs)
        async_copy.async_copy_global_to_shared(v_bufs.index(stage), v_ptr + ptrs)
        async_copy.mbarrier_arrive(ready.index(stage), increment_count=False)


@gluon.jit
def _consumer(k_ptr, v_ptr, k_bufs, v_bufs, ready, empty, table_ptr, table_stride, out_ptr, kv_heads,
              tiles, SHIFT, TOUCH, CHECK):
    STAGES: gl.constexpr = k_bufs.type.shape[0]
    TILE: gl.constexpr = k_bufs.type.shape[1]
    D: gl.constexpr = k_bufs.type.shape[2]
    layout: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [4, 1], [1, 0])
    acc = gl.zeros([TILE, D], gl.float32, layout)
    for t in range(tiles):
        stage = t % STAGES
        mbarrier.wait(ready.index(stage), (t // STAGES) & 1)
        if TOUCH:
            v = v_bufs.index(stage).load(layout)
            acc += v.to(gl.float16).to(gl.float32)
        if CHECK:
            k = k_bufs.index(stage).load(layout)
            acc += k.to(gl.float16).to(gl.float32)
        mbarrier.arrive(empty.index(stage), count=1)
    gl.store(out_ptr + gl.program_id(0), gl.sum(gl.sum(acc, 1), 0))


@gluon.jit
def cp_stream_kernel(k_ptr, v_ptr, table_ptr, table_stride, out_ptr, kv_heads, tiles, SHIFT, WHOLE: gl.constexpr,
                     TILE: gl.constexpr, D: gl.constexpr, STAGES: gl.constexpr, LW: gl.constexpr,
                     REGS: gl.constexpr, TOUCH: gl.constexpr, CHECK: gl.constexpr):
    lay: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
    k_bufs = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, TILE, D], lay)
    v_bufs = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, TILE, D], lay)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=LW * 32)
        mbarrier.init(empty.index(i), count=1)
    args = (k_ptr, v_ptr, k_bufs, v_bufs, ready, empty, table_ptr, table_stride, out_ptr, kv_heads, tiles,
            SHIFT, TOUCH, CHECK)
    if WHOLE:
        gl.warp_specialize([(_consumer, args), (_cp_loader_whole, args)], [LW], [REGS])
    else:
        gl.warp_specialize([(_consumer, args), (_cp_loader, args)], [LW], [REGS])


# (loader warps, loader registers, whole tile): no spills in the sm_90 compile
CONFIGS = ((1, 80, 0), (2, 80, 0), (4, 56, 0), (1, 200, 1), (2, 128, 1), (4, 96, 1))


def launch(k, v, table, out, tile, stages, lw, regs, touch=1, check=0, whole=0):
    nb, block, heads, d = k.shape
    seqs = table.shape[0]
    tiles = table.shape[1] * block // tile
    return cp_stream_kernel[(seqs * heads,)](k, v, table, table.stride(0), out, heads, tiles, block.bit_length() - 1,
                                             WHOLE=whole, TILE=tile,
                                             D=d, STAGES=stages, LW=lw, REGS=regs, TOUCH=touch, CHECK=check,
                                             num_warps=4)


def expected_sums(k, v, table, check):
    """Each program's sum of fp16(V) (and K with check) over its item's keys, in fp64."""
    nb, block, heads, d = k.shape
    seqs, per = table.shape
    rows = table.long()  # [seqs, per]
    vv = v.to(torch.float16).double()[rows]  # [seqs, per, block, heads, d]
    s = vv.sum(dim=(1, 2, 4))  # [seqs, heads]
    if check:
        s = s + k.to(torch.float16).double()[rows].sum(dim=(1, 2, 4))
    return s.reshape(-1)


def main():
    from perf import roofline
    from perf.measure import timing
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "tma_probe", "docs/data/candidates-h200-2026-12-01/token-items/tma-stream-probe.py")
    tma_probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tma_probe)
    out_dir = os.environ.get("OUT", "/tmp")
    lim = roofline.measure_limits()
    rows = []
    doc = {"gpu": torch.cuda.get_device_name(), "copy_tb_s": lim.copy_tb_s, "rows": rows}

    def save():
        json.dump(doc, open(os.path.join(out_dir, "cpasync_probe.json"), "w"), indent=1)

    def timed(label, fn, nbytes, **kw):
        try:
            fn(); torch.cuda.synchronize()
            ms = timing.time_graph(fn, samples=25).median
        except Exception as e:
            print("failed", label, kw, repr(e)[:400], flush=True)
            rows.append(dict(label=label, failed=repr(e)[:400], **kw)); save()
            return
        r = dict(label=label, us=ms * 1e3, pct=100 * nbytes / (lim.copy_tb_s * 1e12) / (ms * 1e-3), **kw)
        rows.append(r); save()
        print(json.dumps(r), flush=True)

    for seqs, keys, heads in ((32, 4096, 4), (16, 4096, 8), (32, 4096, 8)):
        for block in (16, 32):
            nb = seqs * keys // block
            torch.manual_seed(0)
            k = torch.randn(nb, block, heads, 128, device="cuda").to(torch.float8_e4m3fn)
            v = torch.randn(nb, block, heads, 128, device="cuda").to(torch.float8_e4m3fn)
            table = torch.randperm(nb, device="cuda", dtype=torch.int32).view(seqs, keys // block).contiguous()
            out = torch.full((1 << 16,), float("nan"), device="cuda")
            nbytes = 2 * k.numel()
            row = dict(seqs=seqs, keys=keys, kv_heads=heads, block=block)
            # correctness of the cp.async loaders first: every K and V byte of each item summed once
            for lw, regs, whole in CONFIGS:
                out.fill_(float("nan"))
                try:
                    launch(k, v, table, out, 128, 3, lw, regs, touch=1, check=1, whole=whole)
                    torch.cuda.synchronize()
                    want = expected_sums(k, v, table, 1)
                    got = out[: want.numel()].double()
                    err = ((got - want).abs() / want.abs().clamp_min(1)).max().item()
                except Exception as e:
                    err = repr(e)[:300]
                rows.append(dict(label="check", lw=lw, regs=regs, whole=whole, rel_err=err, **row)); save()
                print("check", row, lw, regs, whole, err, flush=True)
            kd, vd = tma_probe.descs(k, v, block)
            for stages in (3, 4):
                timed("tma", lambda: tma_probe.stream_kernel[(seqs * heads,)](
                    kd, vd, table, table.stride(0), out, heads, keys // 128, TILE=128, STAGES=stages, SEGS=1,
                    TOUCH=1, num_warps=4), nbytes, stages=stages, **row)
            for (lw, regs, whole), stages in itertools.product(CONFIGS, (3, 4, 6)):
                timed("cp.async", lambda: launch(k, v, table, out, 128, stages, lw, regs, whole=whole), nbytes,
                      lw=lw, stages=stages, regs=regs, whole=whole, **row)
            del k, v


if __name__ == "__main__":
    main()

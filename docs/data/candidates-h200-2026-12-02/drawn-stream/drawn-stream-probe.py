"""Probe: what a TMA-fed stream of the paged fp8 decode's bytes reaches when its programs (a persistent grid)
draw pieces of PIECE tiles of (sequence, KV head) items from a counter, so that the SMs that stream faster take
more pieces and the programs' ends even out; nothing merges (the bound for items split at no cost). A loader
warp copies each cache block of K and V ([BLOCK, 128] e4m3 boxes) into STAGES buffers of 128 keys; the consumer
warpgroup waits on each stage and (TOUCH) converts V's tile to fp16 and sums it, then releases it. The last
program out zeroes the counters (graph replays start at zero). Run from the repository root on an sm_90 GPU;
writes $OUT/drawn_probe.json."""
import json, os, itertools
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma


@gluon.jit
def _loader(k_desc, v_desc, k_bufs, v_bufs, ready, empty, done, table_ptr, table_stride, out_ptr, counter_ptr,
            kv_heads, items, item_tiles, PIECE: gl.constexpr, TOUCH: gl.constexpr):
    STAGES: gl.constexpr = k_bufs.type.shape[0]
    TILE: gl.constexpr = k_bufs.type.shape[1]
    BLOCK: gl.constexpr = k_desc.block_type.shape[0]
    D: gl.constexpr = k_desc.block_type.shape[1]
    PER_TILE: gl.constexpr = TILE // BLOCK
    DRAW: gl.constexpr = PIECE - STAGES if PIECE > STAGES else 0
    pieces_per_item = item_tiles // PIECE
    pieces = items * pieces_per_item
    # pieces numbered item-major within a piece index: piece p is item p % items, its (p // items)-th piece,
    # so the first draws spread over the items as a program an item would
    p = gl.program_id(0)
    t = 0
    while p < pieces:
        item = p % items
        first = (p // items) * PIECE
        seq = item // kv_heads
        col = (item % kv_heads) * D
        table = table_ptr + seq.to(gl.int64) * table_stride
        nxt = p
        for u in range(PIECE):
            if u == DRAW:  # the next piece drawn a few tiles before this one's end
                nxt = gl.num_programs(0) + gl.atomic_add(counter_ptr, 1, sem="relaxed")
            j = first + u
            stage = t % STAGES
            mbarrier.wait(empty.index(stage), ((t // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(stage), 2 * PER_TILE * k_desc.block_type.nbytes)
            for i in gl.static_range(PER_TILE):
                block = gl.load(table + j * PER_TILE + i)
                tma.async_copy_global_to_shared(k_desc, [block * BLOCK, col], ready.index(stage),
                                                k_bufs.index(stage).slice(i * BLOCK, BLOCK))
                tma.async_copy_global_to_shared(v_desc, [block * BLOCK, col], ready.index(stage),
                                                v_bufs.index(stage).slice(i * BLOCK, BLOCK))
            t += 1
        p = nxt
    # no more pieces: the tile count to the consumer, then the count-out
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
    stage = t % STAGES
    mbarrier.wait(empty.index(stage), ((t // STAGES) & 1) ^ 1)
    done.store(gl.full([1], 0, gl.int32, layout) + t)
    gl.thread_barrier()
    mbarrier.arrive(ready.index(stage), count=1)
    if gl.atomic_add(counter_ptr + 1, 1) == gl.num_programs(0) - 1:
        gl.atomic_xchg(counter_ptr, 0)
        gl.atomic_xchg(counter_ptr + 1, 0)


@gluon.jit
def _consumer(k_desc, v_desc, k_bufs, v_bufs, ready, empty, done, table_ptr, table_stride, out_ptr, counter_ptr,
              kv_heads, items, item_tiles, PIECE: gl.constexpr, TOUCH: gl.constexpr):
    STAGES: gl.constexpr = k_bufs.type.shape[0]
    TILE: gl.constexpr = k_bufs.type.shape[1]
    D: gl.constexpr = k_desc.block_type.shape[1]
    layout: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [4, 1], [1, 0])
    one: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    acc = gl.zeros([TILE, D], gl.float32, layout)
    t = 0
    total = -1
    while t != total:
        stage = t % STAGES
        mbarrier.wait(ready.index(stage), (t // STAGES) & 1)
        # the loader's last arrival carries no bytes: the count it stored says so
        total = gl.max(done.load(one), axis=0)
        if t != total:
            if TOUCH:
                v = v_bufs.index(stage).load(layout)
                acc += v.to(gl.float16).to(gl.float32)
            mbarrier.arrive(empty.index(stage), count=1)
            t += 1
    if TOUCH:
        gl.store(out_ptr + gl.program_id(0), gl.sum(gl.sum(acc, 1), 0))


@gluon.jit
def drawn_kernel(k_desc, v_desc, table_ptr, table_stride, out_ptr, counter_ptr, kv_heads, items, item_tiles,
                 TILE: gl.constexpr, STAGES: gl.constexpr, PIECE: gl.constexpr, TOUCH: gl.constexpr):
    D: gl.constexpr = k_desc.block_type.shape[1]
    k_bufs = gl.allocate_shared_memory(k_desc.dtype, [STAGES, TILE, D], k_desc.layout)
    v_bufs = gl.allocate_shared_memory(v_desc.dtype, [STAGES, TILE, D], v_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    done = gl.allocate_shared_memory(gl.int32, [1], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    done.store(gl.full([1], -1, gl.int32, gl.BlockedLayout([1], [32], [4], [0])))
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    gl.thread_barrier()
    args = (k_desc, v_desc, k_bufs, v_bufs, ready, empty, done, table_ptr, table_stride, out_ptr, counter_ptr,
            kv_heads, items, item_tiles, PIECE, TOUCH)
    gl.warp_specialize([(_consumer, args), (_loader, args)], [1], [48])


def descs(k, v):
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    nb, bs, h, d = k.shape
    lay = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
    rows = [nb * bs, h * d]
    return (TensorDescriptor(k, rows, [k.stride(1), 1], [bs, d], lay),
            TensorDescriptor(v, rows, [v.stride(1), 1], [bs, d], lay))


def main():
    from perf.measure import timing
    from perf import roofline
    out_dir = os.environ.get("OUT", "/tmp")
    lim = roofline.measure_limits()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    tile = 128
    per_sm = [int(x) for x in os.environ.get("PER_SM", "1").split(",")]
    stage_list = [int(x) for x in os.environ.get("STAGES", "3").split(",")]
    piece_list = [int(x) for x in os.environ.get("PIECES", "32,16,8,4,2").split(",")]
    # qwen2.5-7b 32 x 4k (4 KV heads), llama3-8b 16 x 4k (8): 134 MB; llama3-8b 32 x 4k: 268 MB
    for seqs, keys, heads in ((32, 4096, 4), (16, 4096, 8), (32, 4096, 8)):
        for block in (16, 32):
            nb = seqs * keys // block
            torch.manual_seed(0)
            k = torch.randn(nb, block, heads, 128, device="cuda").to(torch.float8_e4m3fn)
            v = torch.randn(nb, block, heads, 128, device="cuda").abs().to(torch.float8_e4m3fn)
            v_sum = v.float().sum().item()  # every V byte consumed once: the programs' sums add up to it
            table = torch.randperm(nb, device="cuda", dtype=torch.int32).view(seqs, keys // block).contiguous()
            out = torch.zeros(1 << 16, device="cuda")
            counter = torch.zeros(2, device="cuda", dtype=torch.int32)
            kd, vd = descs(k, v)
            nbytes = 2 * k.numel()
            items = seqs * heads
            item_tiles = keys // tile
            for stages, piece, grid, touch in itertools.product(stage_list, piece_list, ["items"] + per_sm, (0, 1)):
                if grid == "items" and piece != 32:
                    continue
                programs = items if grid == "items" else min(grid * sms, items * item_tiles // piece)
                fn = lambda: drawn_kernel[(programs,)](kd, vd, table, table.stride(0), out, counter, heads, items,
                                                       item_tiles, TILE=tile, STAGES=stages, PIECE=piece,
                                                       TOUCH=touch, num_warps=4)
                try:
                    out.zero_()
                    fn(); torch.cuda.synchronize()
                    assert counter.tolist() == [0, 0], counter.tolist()
                    if touch:
                        got = out[:programs].double().sum().item()
                        assert abs(got - v_sum) <= 1e-4 * v_sum, (got, v_sum)
                    ms = timing.time_graph(fn, samples=25).median
                    assert counter.tolist() == [0, 0], counter.tolist()
                except Exception as e:
                    print("failed", seqs, keys, heads, block, piece, grid, touch, repr(e)[:300], flush=True)
                    continue
                r = dict(seqs=seqs, keys=keys, kv_heads=heads, block=block, stages=stages, piece_tiles=piece, grid=grid,
                         programs=programs, touch=touch, us=ms * 1e3,
                         pct=100 * nbytes / (lim.copy_tb_s * 1e12) / (ms * 1e-3))
                rows.append(r)
                print(json.dumps(r), flush=True)
                json.dump({"gpu": torch.cuda.get_device_name(), "sms": sms, "copy_tb_s": lim.copy_tb_s,
                           "rows": rows}, open(os.path.join(out_dir, "drawn_probe.json"), "w"), indent=1)
            del k, v


if __name__ == "__main__":
    main()

"""Probe: what a TMA-fed stream of the paged fp8 decode's bytes reaches at one or two programs per SM
(the bound for a warp-specialized fp8 decode). Each program = (sequence, KV head, segment): a loader warp
copies each cache block of K and V ([BLOCK, 128] e4m3 boxes) into STAGES buffers of TILE keys; the consumer
warpgroup waits on each stage and (TOUCH) converts V's tile to fp16 and sums it, then releases it.
Run from the repository root on an sm_90 GPU; writes $OUT/tma_probe.json."""
import json, os, sys, itertools
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma


@gluon.jit
def _loader(k_desc, v_desc, k_bufs, v_bufs, ready, empty, table_ptr, table_stride, out_ptr, kv_heads,
            seg_tiles, SEGS: gl.constexpr, TOUCH: gl.constexpr):
    STAGES: gl.constexpr = k_bufs.type.shape[0]
    TILE: gl.constexpr = k_bufs.type.shape[1]
    BLOCK: gl.constexpr = k_desc.block_type.shape[0]
    D: gl.constexpr = k_desc.block_type.shape[1]
    PER_TILE: gl.constexpr = TILE // BLOCK
    pid = gl.program_id(0)
    item = pid // SEGS
    seg = pid % SEGS
    seq = item // kv_heads
    col = (item % kv_heads) * D
    table = table_ptr + seq.to(gl.int64) * table_stride
    for t in range(seg_tiles):
        j = seg * seg_tiles + t
        stage = t % STAGES
        mbarrier.wait(empty.index(stage), ((t // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(stage), 2 * PER_TILE * k_desc.block_type.nbytes)
        for i in gl.static_range(PER_TILE):
            block = gl.load(table + j * PER_TILE + i)
            tma.async_copy_global_to_shared(k_desc, [block * BLOCK, col], ready.index(stage),
                                            k_bufs.index(stage).slice(i * BLOCK, BLOCK))
            tma.async_copy_global_to_shared(v_desc, [block * BLOCK, col], ready.index(stage),
                                            v_bufs.index(stage).slice(i * BLOCK, BLOCK))


@gluon.jit
def _consumer(k_desc, v_desc, k_bufs, v_bufs, ready, empty, table_ptr, table_stride, out_ptr, kv_heads,
              seg_tiles, SEGS: gl.constexpr, TOUCH: gl.constexpr):
    STAGES: gl.constexpr = k_bufs.type.shape[0]
    TILE: gl.constexpr = k_bufs.type.shape[1]
    D: gl.constexpr = k_desc.block_type.shape[1]
    layout: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [4, 1], [1, 0])
    acc = gl.zeros([TILE, D], gl.float32, layout)
    for t in range(seg_tiles):
        stage = t % STAGES
        mbarrier.wait(ready.index(stage), (t // STAGES) & 1)
        if TOUCH:
            v = v_bufs.index(stage).load(layout)
            acc += v.to(gl.float16).to(gl.float32)
        mbarrier.arrive(empty.index(stage), count=1)
    if TOUCH:
        gl.store(out_ptr + gl.program_id(0), gl.sum(gl.sum(acc, 1), 0))


@gluon.jit
def stream_kernel(k_desc, v_desc, table_ptr, table_stride, out_ptr, kv_heads, seg_tiles,
                  TILE: gl.constexpr, STAGES: gl.constexpr, SEGS: gl.constexpr, TOUCH: gl.constexpr):
    D: gl.constexpr = k_desc.block_type.shape[1]
    k_bufs = gl.allocate_shared_memory(k_desc.dtype, [STAGES, TILE, D], k_desc.layout)
    v_bufs = gl.allocate_shared_memory(v_desc.dtype, [STAGES, TILE, D], v_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    args = (k_desc, v_desc, k_bufs, v_bufs, ready, empty, table_ptr, table_stride, out_ptr, kv_heads, seg_tiles,
            SEGS, TOUCH)
    gl.warp_specialize([(_consumer, args), (_loader, args)], [1], [48])


def descs(k, v, block):
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
    from kernels import VARIANTS
    from kernels.batch import build_batch
    from perf import scenarios
    from perf.measure.cases import host_hints
    for name in ("qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16", "qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16",
                 "llama3-8b/decode/batch16-kv4096/block16/fp8/bf16", "llama3-8b/decode/batch32-kv4096/block16/fp8/bf16"):
        spec = scenarios.Scenario.parse(name).spec()
        b = build_batch(spec, "cuda"); var = VARIANTS["static_grid"]; h = host_hints(var, spec)
        o = b.new_output()
        fn = lambda: var(*b.args(), out=o, **b.options, **h)
        ms = timing.time_graph(fn, samples=25).median
        r = dict(tree=name, us=ms * 1e3, pct=100 * roofline.hbm_bytes(spec) / (lim.copy_tb_s * 1e12) / (ms * 1e-3))
        rows.append(r); print(json.dumps(r), flush=True)
        del b, o
    # qwen2.5-7b 32 x 4k (4 KV heads), llama3-8b 16 x 4k (8), 32 x 4k (8): 134, 134, 268 MB
    for seqs, keys, heads in ((32, 4096, 4), (16, 4096, 8), (32, 4096, 8)):
        for block in (16, 32):
            nb = seqs * keys // block
            torch.manual_seed(0)
            k = torch.randn(nb, block, heads, 128, device="cuda").to(torch.float8_e4m3fn)
            v = torch.randn(nb, block, heads, 128, device="cuda").to(torch.float8_e4m3fn)
            table = torch.randperm(nb, device="cuda", dtype=torch.int32).view(seqs, keys // block).contiguous()
            out = torch.zeros(1 << 16, device="cuda")
            kd, vd = descs(k, v, block)
            nbytes = 2 * k.numel()
            for tile, stages, segs, touch in itertools.product((128,), (2, 3, 4, 6), (1, 2), (0, 1)):
                if tile * 128 * 2 * stages > 200 * 1024:
                    continue
                items = seqs * heads
                seg_tiles = keys // tile // segs
                fn = lambda: stream_kernel[(items * segs,)](kd, vd, table, table.stride(0), out, heads, seg_tiles,
                                                            TILE=tile, STAGES=stages, SEGS=segs, TOUCH=touch,
                                                            num_warps=4)
                try:
                    fn(); torch.cuda.synchronize()
                    ms = timing.time_graph(fn, samples=25).median
                except Exception as e:
                    print("failed", seqs, keys, heads, block, tile, stages, segs, touch, repr(e)[:300], flush=True)
                    continue
                r = dict(seqs=seqs, keys=keys, kv_heads=heads, block=block, tile=tile, stages=stages, segs=segs,
                         touch=touch, programs=items * segs, us=ms * 1e3,
                         pct=100 * nbytes / (lim.copy_tb_s * 1e12) / (ms * 1e-3))
                rows.append(r)
                print(json.dumps(r), flush=True)
                json.dump({"gpu": torch.cuda.get_device_name(), "sms": sms, "copy_tb_s": lim.copy_tb_s,
                           "rows": rows}, open(os.path.join(out_dir, "tma_probe.json"), "w"), indent=1)
            del k, v


if __name__ == "__main__":
    main()

"""Lab: the TMA stream probe bridged toward the token items' loader, one of their differences at a time (separate
K and V barriers, the start's dependent reads, the shared memory, a third partition, the count-out), timed beside
the token items (q in one e4m3 part) and the tree; one process, graph replay, L2 flushed, 5 rounds."""
import json, os, statistics, sys
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma


@gluon.jit
def _loader(k_desc, v_desc, k_bufs, v_bufs, kr, ke, vr, ve, pad, table_ptr, table_stride, out_ptr, kv_heads,
            n_tiles, cu_ptr, lens_ptr, tickets_ptr, SPLIT: gl.constexpr, START: gl.constexpr,
            LEAVE: gl.constexpr, PAD: gl.constexpr):
    STAGES: gl.constexpr = k_bufs.type.shape[0]
    TILE: gl.constexpr = k_bufs.type.shape[1]
    BLOCK: gl.constexpr = k_desc.block_type.shape[0]
    D: gl.constexpr = k_desc.block_type.shape[1]
    PER_TILE: gl.constexpr = TILE // BLOCK
    item = gl.program_id(0)
    seq = item // kv_heads
    col = (item % kv_heads) * D
    tiles = n_tiles
    if START:  # _token_item's chain: cu_seqlens_q of the guess, then its length
        start = gl.load(cu_ptr + seq)
        stop = gl.load(cu_ptr + seq + 1)
        seq = gl.where((seq >= start) & (seq < stop), seq, 0)
        seq_len = gl.load(lens_ptr + seq)
        tiles = gl.cdiv(seq_len, TILE)
    table = table_ptr + seq.to(gl.int64) * table_stride
    for t in range(tiles):
        stage = t % STAGES
        if SPLIT:
            mbarrier.wait(ke.index(stage), ((t // STAGES) & 1) ^ 1)
            mbarrier.wait(ve.index(stage), ((t // STAGES) & 1) ^ 1)
            mbarrier.expect(kr.index(stage), PER_TILE * k_desc.block_type.nbytes)
            mbarrier.expect(vr.index(stage), PER_TILE * k_desc.block_type.nbytes)
        else:
            mbarrier.wait(ke.index(stage), ((t // STAGES) & 1) ^ 1)
            mbarrier.expect(kr.index(stage), 2 * PER_TILE * k_desc.block_type.nbytes)
        for i in gl.static_range(PER_TILE):
            block = gl.load(table + t * PER_TILE + i)
            tma.async_copy_global_to_shared(k_desc, [block * BLOCK, col], kr.index(stage),
                                            k_bufs.index(stage).slice(i * BLOCK, BLOCK))
            if SPLIT:
                tma.async_copy_global_to_shared(v_desc, [block * BLOCK, col], vr.index(stage),
                                                v_bufs.index(stage).slice(i * BLOCK, BLOCK))
            else:
                tma.async_copy_global_to_shared(v_desc, [block * BLOCK, col], kr.index(stage),
                                                v_bufs.index(stage).slice(i * BLOCK, BLOCK))
    if LEAVE:
        if gl.atomic_add(tickets_ptr + 1, 1) == gl.num_programs(0) - 1:
            gl.atomic_xchg(tickets_ptr, 0)
            gl.atomic_xchg(tickets_ptr + 1, 0)


@gluon.jit
def _consumer(k_desc, v_desc, k_bufs, v_bufs, kr, ke, vr, ve, pad, table_ptr, table_stride, out_ptr, kv_heads,
              n_tiles, cu_ptr, lens_ptr, tickets_ptr, SPLIT: gl.constexpr, START: gl.constexpr,
              LEAVE: gl.constexpr, PAD: gl.constexpr):
    STAGES: gl.constexpr = k_bufs.type.shape[0]
    TILE: gl.constexpr = k_bufs.type.shape[1]
    D: gl.constexpr = k_desc.block_type.shape[1]
    layout: gl.constexpr = gl.BlockedLayout([1, 16], [8, 4], [4, 1], [1, 0])
    acc = gl.zeros([TILE, D], gl.float32, layout)
    for t in range(n_tiles):
        stage = t % STAGES
        mbarrier.wait(kr.index(stage), (t // STAGES) & 1)
        if SPLIT:
            mbarrier.wait(vr.index(stage), (t // STAGES) & 1)
        v = v_bufs.index(stage).load(layout)
        acc += v.to(gl.float16).to(gl.float32)
        mbarrier.arrive(ke.index(stage), count=1)
        if SPLIT:
            mbarrier.arrive(ve.index(stage), count=1)
    PAD_ROWS: gl.constexpr = pad.type.shape[1]
    if PAD_ROWS == TILE:
        pad.index(0).store(acc.to(gl.float16))
    gl.store(out_ptr + gl.program_id(0), gl.sum(gl.sum(acc, 1), 0))


@gluon.jit
def _idle(k_desc, v_desc, k_bufs, v_bufs, kr, ke, vr, ve, pad, table_ptr, table_stride, out_ptr, kv_heads,
          n_tiles, cu_ptr, lens_ptr, tickets_ptr, SPLIT: gl.constexpr, START: gl.constexpr,
          LEAVE: gl.constexpr, PAD: gl.constexpr):
    pass


@gluon.jit
def bridge_kernel(k_desc, v_desc, table_ptr, table_stride, out_ptr, kv_heads, n_tiles, cu_ptr, lens_ptr,
                  tickets_ptr, TILE: gl.constexpr, STAGES: gl.constexpr, SPLIT: gl.constexpr,
                  START: gl.constexpr, LEAVE: gl.constexpr, PAD: gl.constexpr, WARPS3: gl.constexpr):
    D: gl.constexpr = k_desc.block_type.shape[1]
    k_bufs = gl.allocate_shared_memory(k_desc.dtype, [STAGES, TILE, D], k_desc.layout)
    v_bufs = gl.allocate_shared_memory(v_desc.dtype, [STAGES, TILE, D], v_desc.layout)
    pad_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    pad = gl.allocate_shared_memory(gl.float16, [3 if PAD else 1, TILE if PAD else 8, D], pad_layout)
    kr = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    ke = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    vr = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    ve = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(kr.index(i), count=1)
        mbarrier.init(ke.index(i), count=1)
        mbarrier.init(vr.index(i), count=1)
        mbarrier.init(ve.index(i), count=1)
    args = (k_desc, v_desc, k_bufs, v_bufs, kr, ke, vr, ve, pad, table_ptr, table_stride, out_ptr, kv_heads,
            n_tiles, cu_ptr, lens_ptr, tickets_ptr, SPLIT, START, LEAVE, PAD)
    if WARPS3:
        gl.warp_specialize([(_consumer, args), (_idle, args), (_loader, args)], [4, 1], [128, 24])
    else:
        gl.warp_specialize([(_consumer, args), (_loader, args)], [1], [48])


FORMS = {"probe": {}, "split": dict(SPLIT=True), "start": dict(START=True), "pad": dict(PAD=True),
         "warps3": dict(WARPS3=True), "leave": dict(LEAVE=True),
         "all": dict(SPLIT=True, START=True, PAD=True, WARPS3=True, LEAVE=True)}


def main():
    sys.path.insert(0, os.getcwd())
    import importlib.util
    from kernels import VARIANTS
    from kernels.batch import build_batch
    from kernels.paged_attention import heuristics, planning
    from perf import scenarios, roofline
    from perf.measure import timing
    from perf.measure.cases import host_hints
    ps = importlib.util.spec_from_file_location("probe", "docs/data/candidates-h200-2026-12-01/token-items/tma-stream-probe.py")
    pm = importlib.util.module_from_spec(ps); ps.loader.exec_module(pm)
    lim = roofline.measure_limits()
    warm = os.environ.get("WARM_ONLY")
    res = []
    for name in sys.argv[1].split(","):
        spec = scenarios.Scenario.parse(name).spec()
        b = build_batch(spec, "cuda"); v = VARIANTS["static_grid"]; h = host_hints(v, spec)
        out = b.new_output()
        cfg = heuristics.Config(128, 128, 1, num_warps=4, num_stages=2, warp_specialized=True, ws_token_items=True,
                                qk_e4m3=True)
        fns = {"tree": lambda: v(*b.args(), out=out, **b.options, **h),
               "tokens-q1": lambda: v(*b.args(), out=out, config=cfg, **b.options, **h)}
        kd, vd = pm.descs(b.k_cache, b.v_cache, b.k_cache.shape[1])
        heads = b.k_cache.shape[2]; seqs = b.block_table.shape[0]
        pout = torch.zeros(1 << 16, device="cuda")
        tickets = torch.zeros(2, dtype=torch.int32, device="cuda")
        n_tiles = spec.kv_lens[0] // 128
        for label, flags in FORMS.items():
            kw = {**dict(SPLIT=False, START=False, LEAVE=False, PAD=False, WARPS3=False), **flags}
            fns[label] = (lambda kw=kw: bridge_kernel[(seqs * heads,)](
                kd, vd, b.block_table, b.block_table.stride(0), pout, heads, n_tiles, b.cu_seqlens_q, b.seq_lens,
                tickets, TILE=128, STAGES=3, num_warps=4, **kw))
        graphs = {}
        for label, fn in fns.items():
            planning._PLANS.clear()
            try:
                fn(); torch.cuda.synchronize()
                graphs[label] = timing.capture_graph(fn)
            except Exception as e:
                print(label, "failed", repr(e)[:400], flush=True)
        if warm:
            print("warmed", name, sorted(graphs), flush=True)
            continue
        times = {k: [] for k in graphs}
        for r in range(5):
            for label, g in graphs.items():
                times[label].append(timing.time_graph(fns[label], graph=g, samples=25).median * 1e3)
        row = {k: round(statistics.median(t), 2) for k, t in times.items()}
        nbytes = roofline.hbm_bytes(spec)
        pct = {k: round(100 * nbytes / (lim.copy_tb_s * 1e6) / t, 1) for k, t in row.items()}
        print(name, json.dumps(row), json.dumps(pct), flush=True)
        res.append(dict(scenario=name, us=row, pct_of_copy=pct))
        json.dump({"gpu": torch.cuda.get_device_name(), "copy_tb_s": lim.copy_tb_s, "rows": res},
                  open(os.path.join(os.environ.get("OUT", "/tmp"), "bridge.json"), "w"), indent=1)


if __name__ == "__main__":
    main()

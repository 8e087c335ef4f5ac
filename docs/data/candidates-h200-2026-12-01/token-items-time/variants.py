"""Lab: the token-item kernel's variants (module copies with one part changed) timed beside the tree, one
process, graph replay, L2 flushed; outputs not checked (some variants compute nothing right)."""
import importlib.util, json, os, sys, dataclasses, statistics
import torch
from kernels import VARIANTS
from kernels.batch import build_batch
from kernels.paged_attention import warp_specialized as ws, heuristics, planning
from perf import scenarios, roofline
from perf.measure import timing
from perf.measure.cases import host_hints
lim = roofline.measure_limits()
files = sys.argv[2].split(",")
mods = {}
for f in files:
    spec_ = importlib.util.spec_from_file_location("wsv_" + os.path.basename(f), f)
    m = importlib.util.module_from_spec(spec_); spec_.loader.exec_module(m); mods[os.path.basename(f)] = m
orig = ws.ws_prefill_kernel
res = []
for name in sys.argv[1].split(","):
    spec = scenarios.Scenario.parse(name).spec()
    b = build_batch(spec, "cuda"); v = VARIANTS["static_grid"]; h = host_hints(v, spec)
    out = b.new_output()
    tree_cfg = None
    fns = {"tree": (orig, lambda: v(*b.args(), out=out, **b.options, **h))}
    _, [l0, *_] = v.plan(*b.args(), out=out, **b.options)
    for label, m in mods.items():
        for rounded in ((True,) if os.environ.get('Q1_ONLY') else (False, True)):
            cfg = heuristics.Config(128, 128, 1, num_warps=4, num_stages=2, warp_specialized=True,
                                    ws_token_items=True, qk_e4m3=rounded)
            fns[label + ("/q1" if rounded else "/q2")] = (m.ws_prefill_kernel,
                lambda cfg=cfg: v(*b.args(), out=out, config=cfg, **b.options, **h))
    if os.environ.get("PROBE"):
        import importlib.util as iu
        ps = iu.spec_from_file_location("probe", "docs/data/candidates-h200-2026-12-01/token-items/tma-stream-probe.py")
        pm = iu.module_from_spec(ps); ps.loader.exec_module(pm)
        q_, kc, vc, bt = b.q, b.k_cache, b.v_cache, b.block_table
        kd, vd = pm.descs(kc, vc, kc.shape[1])
        heads = kc.shape[2]; seqs = bt.shape[0]; items = seqs * heads
        pout = torch.zeros(1 << 16, device="cuda")
        seg_tiles = spec.kv_lens[0] // 128
        for touch in (0, 1):
            fns["probe/t%d" % touch] = (orig, lambda touch=touch: pm.stream_kernel[(items,)](kd, vd, bt, bt.stride(0), pout, heads, seg_tiles, TILE=128, STAGES=3, SEGS=1, TOUCH=touch, num_warps=4))
    graphs = {}
    orig_regs = dict(ws.TOKEN_REGS)
    orig_stages = ws.TOKEN_STAGES
    for label, (kern, fn) in fns.items():
        ws.ws_prefill_kernel = kern
        ws.TOKEN_REGS.clear(); ws.TOKEN_REGS.update(orig_regs)
        ws.TOKEN_STAGES = orig_stages
        mod_ = mods.get(label.split("/")[0])
        if mod_ is not None:
            ws.TOKEN_REGS.update(mod_.TOKEN_REGS)
            ws.TOKEN_STAGES = mod_.TOKEN_STAGES
        planning._PLANS.clear()
        try:
            fn(); torch.cuda.synchronize()
            graphs[label] = timing.capture_graph(fn)
        except Exception as e:
            print(label, "failed", repr(e)[:300], flush=True)
    ws.ws_prefill_kernel = orig
    ws.TOKEN_REGS.clear(); ws.TOKEN_REGS.update(orig_regs)
    ws.TOKEN_STAGES = orig_stages
    planning._PLANS.clear()
    times = {k: [] for k in graphs}
    for r in range(5):
        for label, g in graphs.items():
            times[label].append(timing.time_graph(fns[label][1], graph=g, samples=25).median * 1e3)
    nbytes = roofline.hbm_bytes(spec)
    row = {k: round(statistics.median(t), 2) for k, t in times.items()}
    print(name, json.dumps(row), "tree %.0f%%" % (100 * nbytes / (lim.copy_tb_s * 1e6) / row["tree"]), flush=True)
    res.append(dict(scenario=name, us=row))
    json.dump({"gpu": torch.cuda.get_device_name(), "copy_tb_s": lim.copy_tb_s, "rows": res},
              open(os.path.join(os.environ.get("OUT", "/tmp"), "tok_time.json"), "w"), indent=1)

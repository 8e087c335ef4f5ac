"""Lab: the token-item kernel's variants (module copies with one part changed) timed beside the tree, one
process, graph replay, L2 flushed; outputs not checked (some variants compute nothing right)."""
import importlib.util, json, os, sys, dataclasses, statistics
import torch
from kernels import VARIANTS
from kernels.batch import build_batch
from kernels.paged_attention import warp_specialized as ws, heuristics
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
    fns = {"tree": (orig, lambda: v(*b.args(), out=out, **b.options, **h))}
    for label, m in mods.items():
        for rounded in (False, True):
            cfg = heuristics.Config(128, 128, 1, num_warps=4, num_stages=2, warp_specialized=True,
                                    ws_token_items=True, qk_e4m3=rounded)
            fns[label + ("/q1" if rounded else "/q2")] = (m.ws_prefill_kernel,
                lambda cfg=cfg: v(*b.args(), out=out, config=cfg, **b.options, **h))
    graphs = {}
    for label, (kern, fn) in fns.items():
        ws.ws_prefill_kernel = kern
        try:
            fn(); torch.cuda.synchronize()
            graphs[label] = timing.capture_graph(fn)
        except Exception as e:
            print(label, "failed", repr(e)[:300], flush=True)
    ws.ws_prefill_kernel = orig
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

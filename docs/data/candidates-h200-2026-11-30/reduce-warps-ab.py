"""Lab: the split decode's reduction, its grid (programs per SM) and its warps, A/B in one process: each
setting's plan captured in a CUDA graph over the same tensors (segment buffers shared), timed in alternating
rounds (perf.measure.timing.time_graph, L2 flushed), every output checked against the fp32 reference and
compared bit for bit with the first setting's.

    PYTHONPATH=. python reduce-warps-ab.py OUT.json ROUNDS SCENARIO...

reduce-grid-ab.json ran with SETTINGS p4w4, p8w4, p8w1, all-w1, all-w4 (all: one program per item);
reduce-warps-ab.json with the three below. Before [reduce-one-warp] the tree's reduction was p4w4."""
import dataclasses, json, os, sys, time
import numpy as np, torch
from kernels import VARIANTS
from kernels.batch import build_batch
from kernels.paged_attention import planning
from perf import scenarios
from perf.measure import timing
from perf.measure.cases import host_hints, reference_for

orig = planning.reduce_launch
SETTINGS = {"p4w4": (4, 4), "p4w2": (4, 2), "p4w1": (4, 1)}
def use(name):
    pps, warps = SETTINGS[name]
    planning.REDUCE_PROGRAMS_PER_SM = pps
    planning.reduce_launch = lambda *a, **k: dataclasses.replace(orig(*a, **k), num_warps=warps)
    planning._PLANS.clear()

out_path = sys.argv[1]; rounds = int(sys.argv[2]); names = sys.argv[3:]
v = VARIANTS["static_grid"]; results = {}
for sname in names:
    spec = scenarios.Scenario.parse(sname).spec()
    b = build_batch(spec, "cuda"); hints = host_hints(v, spec)
    ref = reference_for(b).exact.float()
    graphs, outs, info = {}, {}, {}
    for name in SETTINGS:
        use(name)
        out = b.new_output(); outs[name] = out
        fn = lambda out=out: v(*b.args(), out=out, **b.options, **hints)
        launches = v.plan(*b.args(), out=b.new_output(), **b.options, **hints)[1]
        fn(); torch.cuda.synchronize()
        err = float((out.float() - ref).abs().max())
        same = bool(torch.equal(out, outs["p4w4"]))
        graphs[name] = timing.capture_graph(fn)
        info[name] = dict(max_error=err, same_bits=same, grids=[list(L.grid) for L in launches],
                          warps=[L.num_warps for L in launches])
    med = {n: [] for n in SETTINGS}
    order = list(SETTINGS)
    for r in range(rounds):
        for n in order[r % len(order):] + order[:r % len(order)]:
            med[n].append(timing.time_graph(None, graph=graphs[n], samples=25).median)
    base = np.median(med["p4w4"])
    results[sname] = {n: dict(ms=float(np.median(med[n])), ratio=float(np.median(med[n]) / base), **info[n])
                      for n in SETTINGS}
    print(sname, {n: (round(x["ms"], 4), round(x["ratio"], 3), x["same_bits"], round(x["max_error"], 5))
                  for n, x in results[sname].items()}, flush=True)
    json.dump(results, open(out_path, "w"), indent=1)
    del graphs, outs, b
    planning.release_buffers(); torch.cuda.empty_cache()

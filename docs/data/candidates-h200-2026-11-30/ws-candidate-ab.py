"""The tree's warp-specialized kernel against a candidate module (CAND) on the same launches: one process, R
alternating rounds of graph replays, outputs poisoned, checked against the fp32 reference (small batches) and
bit-compared between the two."""
import importlib.util, json, os, statistics, sys
import torch
from kernels import VARIANTS
from kernels.batch import build_batch
from kernels.inputs import OCP_E4M3
from kernels.launch import KernelLaunch
from kernels.paged_attention import planning
from kernels.reference import paged_attention_reference
from perf.measure import timing
from perf.scenarios import Scenario

spec_ = importlib.util.spec_from_file_location("ws_cand", os.environ["CAND"])
cand = importlib.util.module_from_spec(spec_); spec_.loader.exec_module(cand)
R = int(sys.argv[3])
rows = []
for name in sys.argv[1].split(","):
    spec = Scenario.parse(name).spec()
    batch = build_batch(spec, "cuda", poison=True, **({"fp8_dtype": OCP_E4M3} if spec.fp8_kv else {}))
    out = batch.new_output()
    planning.release_buffers()
    _, launches = VARIANTS["static_grid"].plan(*batch.args(), out=out, **batch.options)
    ws = [l for l in launches if l.name == "ws_prefill_kernel"][0]
    ref = (paged_attention_reference(*batch.args(), **batch.options).float()
           if batch.args()[0].shape[0] <= 20000 else None)
    runs, outs, errs = {}, {}, {}
    for label, kernel in (("tree", ws.kernel), ("cand", cand.ws_prefill_kernel)):
        launch = KernelLaunch(kernel, ws.grid, ws.args, ws.constexprs, ws.num_warps, ws.num_stages,
                              ws.vendor_options)
        for _ in range(2):  # twice: the ticket counters must come back to zero
            out.fill_(float("nan")); launch(); torch.cuda.synchronize()
        outs[label] = out.clone()
        errs[label] = (out.float() - ref).abs().max().item() if ref is not None else float("nan")
        runs[label] = launch
    same = bool(torch.equal(outs["tree"], outs["cand"]))
    t0 = timing.time_graph(runs["tree"], samples=3).median
    samples = max(5, min(25, int(300 / max(t0, 0.01))))
    times = {k: [] for k in runs}
    for rnd in range(R):
        for label in (list(runs) if rnd % 2 == 0 else list(reversed(list(runs)))):
            times[label].append(timing.time_graph(runs[label], samples=samples).median)
    ratios = sorted(a / b for a, b in zip(times["cand"], times["tree"]))
    med = {k: statistics.median(v) for k, v in times.items()}
    rows.append(dict(scenario=name, ms=med, rounds=times, err=errs, same_bits=same, cand_over_tree=ratios))
    print(f"{name} tree {med['tree']:.4f} cand {med['cand']:.4f} | cand/tree {statistics.median(ratios):.4f} "
          f"[{ratios[0]:.4f}, {ratios[-1]:.4f}] | same bits {same} err {errs['tree']:.3g}/{errs['cand']:.3g}",
          flush=True)
    json.dump(rows, open(sys.argv[2], "w"), indent=1)
    del out, outs, batch; torch.cuda.empty_cache()

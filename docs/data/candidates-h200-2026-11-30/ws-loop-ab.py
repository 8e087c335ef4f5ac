"""A/B in one process: the warp-specialized kernel before (ws_old.py) and after the loop's restructure.

A record of the H200 run of 2026-11-30: ws_old.py was a copy of kernels/paged_attention/warp_specialized.py
with the first loop (a wait after each product), never committed; run from the repository's root with
that copy beside this script's path in the command."""
import importlib.util, statistics, sys, json
import torch
from kernels import VARIANTS
from kernels.batch import build_batch
from kernels.launch import KernelLaunch
from kernels.paged_attention.heuristics import Config
from kernels.reference import paged_attention_reference
from perf.measure import timing
from perf.scenarios import Scenario
spec_ = importlib.util.spec_from_file_location("ws_old", ".fi/ws/ws_old.py")
old = importlib.util.module_from_spec(spec_); spec_.loader.exec_module(old)
WS = Config(128, 128, 1, num_warps=8, num_stages=2, warp_specialized=True)
names = sys.argv[1].split(",")
rows = []
for name in names:
    batch = build_batch(Scenario.parse(name).spec(), "cuda", poison=True)
    out = batch.new_output()
    _, launches = VARIANTS["static_grid"].plan(*batch.args(), out=out, config=WS, **batch.options)
    [new] = launches
    assert new.name == "ws_prefill_kernel", new.name
    was = KernelLaunch(old.ws_prefill_kernel, new.grid, new.args, new.constexprs, new.num_warps, new.num_stages, new.vendor_options)
    ref = paged_attention_reference(*batch.args(), **batch.options).float()
    res = {}
    for label, launch in (("old", was), ("new", new)):
        out.fill_(float("nan")); launch(); torch.cuda.synchronize()
        err = (out.float() - ref).abs().max().item()
        res[label] = err
    times = {"old": [], "new": []}
    for r in range(5):
        for label, launch in ((("old", was), ("new", new)) if r % 2 == 0 else (("new", new), ("old", was))):
            times[label].append(timing.time_graph(launch, samples=25).median)
    o, n = statistics.median(times["old"]), statistics.median(times["new"])
    rows.append(dict(scenario=name, old=o, new=n, ratio=n / o, err_old=res["old"], err_new=res["new"]))
    print(f"{name}: old {o:.4f} new {n:.4f} ratio {n/o:.3f} max err old {res['old']:.4f} new {res['new']:.4f}", flush=True)
json.dump(rows, open(sys.argv[2], "w"), indent=1)

"""Per-kernel device time of the public entry's graph replay (torch.profiler/CUPTI; 20 replays, each after an L2
flush) beside the whole replay timed as the gates time it, NVIDIA H200, 2026-12-01. Run from the repository root:
`python kernel-times.py SCENARIO[,SCENARIO...]`; writes $OUT/diag.json (kernel-times.json). The harness's own
per-kernel timer is `perf.why.kernel_times` (eager calls, mean per kernel); this script replays the graph the gates
time, after a flush, and keeps each kernel's start and end within a replay, which that one does not."""
import json, os, sys, collections, torch
from kernels import VARIANTS
from kernels.batch import build_batch
from perf import scenarios, roofline
from perf.measure import timing
from perf.measure.cases import host_hints
lim = roofline.measure_limits()
res = []
for name in sys.argv[1].split(","):
    spec = scenarios.Scenario.parse(name).spec()
    b = build_batch(spec, "cuda"); v = VARIANTS["static_grid"]; h = host_hints(v, spec)
    out = b.new_output()
    fn = lambda: v(*b.args(), out=out, **b.options, **h)
    g = timing.capture_graph(fn)
    whole = timing.time_graph(fn, graph=g, samples=25).median
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            flush.zero_(); g.replay()
        torch.cuda.synchronize()
    per = collections.defaultdict(list); spans = []
    evs = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    for e in evs:
        per[e.name[:60]].append(e.device_time if hasattr(e, "device_time") else e.cuda_time)
    nbytes = roofline.hbm_bytes(spec)
    row = dict(scenario=name, graph_ms=whole, pct=100 * nbytes / (lim.copy_tb_s * 1e12) / (whole * 1e-3),
               kernels={k: (len(vs), sorted(vs)[len(vs) // 2]) for k, vs in per.items()})
    # gaps: kernel start/end within each replay (skip the flush)
    ks = sorted([e for e in evs if "zero" not in e.name.lower() and "fill" not in e.name.lower()
                 and "elementwise" not in e.name.lower()], key=lambda e: e.time_range.start)
    if ks:
        row["first_kernels"] = [(e.name[:40], e.time_range.start - ks[0].time_range.start,
                                 e.time_range.end - ks[0].time_range.start) for e in ks[:6]]
    res.append(row); print(json.dumps(row), flush=True)
json.dump({"gpu": torch.cuda.get_device_name(), "copy_tb_s": lim.copy_tb_s, "rows": res},
          open(os.path.join(os.environ.get("OUT", "/tmp"), "diag.json"), "w"), indent=1)

"""Scratch (GPU): the timer's flush (zero 256 MB) against a flush that leaves L2 clean (zero 256 MB, then
read another 256 MB with an int32 max: it writes one element), on every row of the pr suite and the anchor's
1 x 8k prefill: each row's graph replay timed as the harness does (timing.plan once, 25 samples a repeat),
10 repeats a mode, the modes alternating repeat by repeat (ABBA). Per mode: the median of the repeats'
medians and their spread (CV), which is what the latency gate's test sees. Writes $OUT/flush_noise.json."""
import json, os, statistics, sys, time
import torch
from kernels import VARIANTS
from kernels.batch import build_batch
from perf import scenarios
from perf.measure import timing
from perf.measure.cases import host_hints

A = torch.empty(64 << 20, dtype=torch.int32, device="cuda")
B = torch.ones(64 << 20, dtype=torch.int32, device="cuda")
MODES = {"zero": lambda: A.zero_(), "zero+read": lambda: (A.zero_(), B.amax())}


class Flush:
    mode = "zero"

    def zero_(self):
        MODES[self.mode]()


flush = Flush()
timing._flush_buffer = lambda device: flush
OUT = os.environ.get("OUT", "/tmp")
rows = [s.name for s in scenarios.suite("pr")] + ["llama3-8b/prefill/batch1-kv8192/block16/bf16",
                                                  "llama3-8b/prefill/batch1-kv8192/block16/fp8/bf16"]
REPEATS = int(os.environ.get("REPEATS", "10"))
doc = {"gpu": torch.cuda.get_device_name(), "repeats": REPEATS, "rows": []}
t0 = time.time()
for name in rows:
    spec = scenarios.Scenario.parse(name).spec()
    b = build_batch(spec, "cuda")
    v = VARIANTS["static_grid"]
    h = host_hints(v, spec)
    out = b.new_output()
    fn = lambda: v(*b.args(), out=out, **b.options, **h)
    g = timing.capture_graph(fn)
    p = timing.plan(g.replay, 3)
    per = {k: [] for k in MODES}
    for r in range(REPEATS):
        order = list(MODES) if r % 4 in (0, 3) else list(MODES)[::-1]
        for k in order:
            flush.mode = k
            per[k].append(timing.time_graph(fn, graph=g, plan_=p, samples=25).median * 1e3)
    row = {"scenario": name, "reps": p.reps, "us": per,
           "median": {k: statistics.median(x) for k, x in per.items()},
           "cv": {k: statistics.stdev(x) / statistics.fmean(x) for k, x in per.items()},
           "paired": statistics.median(c / z for c, z in zip(per["zero+read"], per["zero"]))}
    doc["rows"].append(row)
    print(f"{name:60s} reps {p.reps:2d} zero {row['median']['zero']:9.2f} us cv {row['cv']['zero']*100:5.2f} %"
          f" | clean {row['median']['zero+read']:9.2f} us cv {row['cv']['zero+read']*100:5.2f} %"
          f" | paired {row['paired']:.4f}  ({time.time() - t0:.0f} s)", flush=True)
    json.dump(doc, open(os.path.join(OUT, "flush_noise.json"), "w"), indent=1)
    del b, out, g
    torch.cuda.empty_cache()

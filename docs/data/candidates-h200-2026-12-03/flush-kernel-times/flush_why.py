"""Scratch (GPU): why does a clean flush (zero 256 MB, then read another 256 MB) make some prefills slower
(8 x 1k fp8 1.014x, 2 x 2k 1.005x) while decodes run 1-5 % faster? Flushes: the timer's zeroing; zeroing
then an int32 max over B; the max alone; zeroing then a 2 ms spin; zeroing, the max, then a 2 ms spin
(a clock or power state after the read would fade over the spin, a state of L2 would not). 12 repeats a
flush, the flushes in a rotating order; SM clock and power sampled by nvidia-smi beside. $OUT/flush_why.json."""
import json, os, statistics, time
import torch
from kernels import VARIANTS
from kernels.batch import build_batch
from perf import scenarios
from perf.measure import timing
from perf.measure.cases import host_hints

A = torch.empty(64 << 20, dtype=torch.int32, device="cuda")
B = torch.ones(64 << 20, dtype=torch.int32, device="cuda")
MODES = {"zero": lambda: A.zero_(),
         "zero+read": lambda: (A.zero_(), B.amax()),
         "read": lambda: B.amax(),
         "zero+spin2": lambda: (A.zero_(), timing._spin(2.0)),
         "zero+read+spin2": lambda: (A.zero_(), B.amax(), timing._spin(2.0))}


class Flush:
    mode = "zero"

    def zero_(self):
        MODES[self.mode]()


flush = Flush()
timing._flush_buffer = lambda device: flush
OUT = os.environ.get("OUT", "/tmp")
rows = ["llama3-8b/prefill/batch8-kv1024/block16/fp8", "llama3-8b/prefill/batch2-kv2048/block16",
        "llama3-8b/decode/batch32-kv2048/block16/fp8", "llama3-8b/prefill/batch1-kv512/block16"]
doc = {"gpu": torch.cuda.get_device_name(), "rows": []}
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
    names = list(MODES)
    for r in range(12):
        for k in names[r % len(names):] + names[:r % len(names)]:
            flush.mode = k
            per[k].append(timing.time_graph(fn, graph=g, plan_=p, samples=25).median * 1e3)
    med = {k: statistics.median(x) for k, x in per.items()}
    paired = {k: statistics.median(a / z for a, z in zip(per[k], per["zero"])) for k in MODES}
    doc["rows"].append({"scenario": name, "reps": p.reps, "us": per, "median": med, "paired": paired})
    print(f"{name:50s} reps {p.reps:2d} " + "  ".join(f"{k} {med[k]:.2f} ({paired[k]:.4f})" for k in MODES),
          flush=True)
    json.dump(doc, open(os.path.join(OUT, "flush_why.json"), "w"), indent=1)
    del b, out, g
    torch.cuda.empty_cache()

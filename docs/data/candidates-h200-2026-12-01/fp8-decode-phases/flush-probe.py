"""Scratch (GPU): what the timer's L2 flush charges the timed call. (1) Does a read of 256 MB evict a
16 MB buffer read 50 times before, as zeroing 256 MB does? (2) The harness's graph time of a few rows
with the flush as it is (zero 256 MB: ~50 MB of dirty lines left in L2), a read of 256 MB (clean lines),
and both (zero, then read a second buffer), interleaved over rounds. Writes $OUT/flushprobe.json."""
import json, os, statistics, sys, torch
from kernels import VARIANTS
from kernels.batch import build_batch
from perf import scenarios
from perf.measure import timing
from perf.measure.cases import host_hints

A = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
B = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
def f_zero(): A.zero_()
def f_read(): B.view(torch.int32).sum()
def f_both(): A.zero_(); B.view(torch.int32).sum()
METHODS = {"zero": f_zero, "read": f_read, "zero+read": f_both}
res = {"gpu": torch.cuda.get_device_name(), "evict": {}, "rows": []}

# (1) eviction
X = torch.empty(16 << 20, dtype=torch.uint8, device="cuda").random_()
Xi = X.view(torch.int32)
def read_x_us(prep):
    ts = []
    for _ in range(15):
        for _ in range(50): Xi.sum()
        prep(); torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        timing._spin(0.05); s.record(); Xi.sum(); e.record(); torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    return statistics.median(ts)
res["evict"]["hot (no flush)"] = read_x_us(lambda: None)
for k, f in METHODS.items():
    res["evict"][k] = read_x_us(f)
print("16 MB read after 50 reads, us:", {k: round(v, 2) for k, v in res["evict"].items()}, flush=True)

class Flush:
    method = "zero"
    def zero_(self): METHODS[self.method]()
flush = Flush()
timing._flush_buffer = lambda device: flush

for name in sys.argv[1].split(","):
    spec = scenarios.Scenario.parse(name).spec()
    b = build_batch(spec, "cuda"); v = VARIANTS["static_grid"]; h = host_hints(v, spec)
    out = b.new_output()
    fn = lambda: v(*b.args(), out=out, **b.options, **h)
    g = timing.capture_graph(fn)
    p = timing.plan(g.replay, 3)
    per = {k: [] for k in METHODS}
    for r in range(5):
        for k in (METHODS if r % 2 == 0 else list(METHODS)[::-1]):
            flush.method = k
            per[k].append(timing.time_graph(fn, graph=g, plan_=p, samples=25).median)
    row = {"scenario": name, "reps": p.reps, **{k: statistics.median(x) for k, x in per.items()}, "rounds": per}
    res["rows"].append(row)
    print(name, "reps", p.reps, " ".join(f"{k} {row[k]*1e3:.2f}us" for k in METHODS),
          f"read/zero {row['read']/row['zero']:.4f} both/zero {row['zero+read']/row['zero']:.4f}", flush=True)
    json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "flushprobe.json"), "w"), indent=1)
    del b, out, g

"""Lab: two calls of the production entry (static_grid, the heuristics' choice) on one scenario (argv[1]), for ncu's
--launch-skip/--launch-count: the first compiles, the second is profiled."""
import sys
import torch
from kernels import VARIANTS
from kernels.batch import build_batch
from perf import scenarios
from perf.measure.cases import host_hints

spec = scenarios.Scenario.parse(sys.argv[1]).spec()
b = build_batch(spec, "cuda")
v = VARIANTS["static_grid"]
h = host_hints(v, spec)
out = b.new_output()
for _ in range(2):
    out.fill_(float("nan"))
    v(*b.args(), out=out, **b.options, **h)
torch.cuda.synchronize()
print(sys.argv[1], "finite", bool(torch.isfinite(out).all()), flush=True)

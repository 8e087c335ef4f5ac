"""Lab: two calls of the production entry in token items (q in one e4m3 part) on one scenario (argv[1]), for ncu's
--launch-skip 1 --launch-count 1: the first compiles, the second is profiled; the output checked against the fp32
reference of q so rounded, as the tests do."""
import sys
import torch
from kernels import VARIANTS
from kernels.batch import build_batch
from kernels.paged_attention import heuristics
from perf import scenarios
from perf.measure.cases import host_hints

spec = scenarios.Scenario.parse(sys.argv[1]).spec()
b = build_batch(spec, "cuda")
v = VARIANTS["static_grid"]
h = host_hints(v, spec)
out = b.new_output()
cfg = heuristics.Config(128, 128, 1, num_warps=4, num_stages=2, warp_specialized=True, ws_token_items=True,
                        qk_e4m3=True)
for _ in range(2):
    out.fill_(float("nan"))
    v(*b.args(), out=out, config=cfg, **b.options, **h)
torch.cuda.synchronize()
print(sys.argv[1], "finite", bool(torch.isfinite(out).all()), flush=True)

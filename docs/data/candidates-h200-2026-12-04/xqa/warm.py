"""Set up the FlashInfer peers on one scenario (their kernels JIT-compiled with nvcc at first use),
and print each one's largest error against the fp32 reference of q itself and of q rounded to e4m3.

    python docs/data/candidates-h200-2026-12-04/xqa/warm.py SCENARIO [PEER ...]
"""
import sys
import time

import torch

from kernels.batch import build_batch
from perf.measure.cases import reference_for
from perf.measure.peer_cases import make_case
from perf.scenarios import Scenario

scenario = Scenario.parse(sys.argv[1])
names = sys.argv[2:] or ["flashinfer_xqa", "flashinfer_paged"]
batch = build_batch(scenario.spec(), "cuda")
ref = reference_for(batch)
for name in names:
    t0 = time.monotonic()
    case = make_case(name, scenario, "cuda", batch, ref)
    line = f"{scenario.name} {name}: set up in {time.monotonic() - t0:.0f} s"
    if case.fn is None:
        print(f"{line}; not timed: {case.skip}", flush=True)
        continue
    out = case.fn().float()
    torch.cuda.synchronize()
    errors = {k: float((out - r.float()).abs().max()) for k, r in
              (("q itself", ref.exact), ("q rounded to e4m3", ref.q_rounded)) if r is not None}
    print(f"{line}; max error " + ", ".join(f"{v:.4f} against {k}" for k, v in errors.items())
          + f"; {case.config[0]['layout']}", flush=True)

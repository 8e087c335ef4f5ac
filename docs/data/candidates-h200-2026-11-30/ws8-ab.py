"""One process: the e4m3 warp-specialized kernel (2 and 3 stages) beside the tree's fp8 choice and the bf16
warp-specialized kernel, each scenario's bf16 and e4m3 batch built from one spec.

A record of the H200 runs of 2026-11-30 (docs/lab/2026-11-30.md, rounds 2-5), in its last form (round 5);
the earlier rounds named other candidates here: the conversion by the loader or the consumers (a
`LOADER_CONVERTS` constexpr of the kernel then), by integer operations (a copy of the kernel module with
its switch off), no conversion at all (a copy without the conversion's loop). Run from the repository's
root: `python3 THIS_FILE SCENARIO,... OUT.json`."""
import statistics, sys, json, dataclasses
import torch
from kernels import VARIANTS
from kernels.batch import build_batch
from kernels.inputs import OCP_E4M3
from kernels.launch import KernelLaunch
from kernels.paged_attention import planning
from kernels.paged_attention.heuristics import Config
from kernels.reference import paged_attention_reference
from perf.measure import timing
from perf.scenarios import Scenario
WS = Config(128, 128, 1, num_warps=8, num_stages=2, warp_specialized=True)
rows = []
for name in sys.argv[1].split(","):
    sc = Scenario.parse(name)
    cands = {}
    ref = {}
    for fp8 in (True, False):
        spec = dataclasses.replace(sc.spec(), fp8_kv=fp8)
        batch = build_batch(spec, "cuda", poison=True, **({"fp8_dtype": OCP_E4M3} if fp8 else {}))
        out = batch.new_output()
        ref[fp8] = (batch, out, paged_attention_reference(*batch.args(), **batch.options).float())
        planning.release_buffers()
        _, [ws] = VARIANTS["static_grid"].plan(*batch.args(), out=out, config=WS, **batch.options)
        assert ws.name == "ws_prefill_kernel"
        if fp8:
            def variant(kernel, stages):
                return KernelLaunch(kernel, ws.grid, ws.args, {**ws.constexprs, "STAGES": stages},
                                    ws.num_warps, ws.num_stages, ws.vendor_options)
            cands["ws8-s2"] = (fp8, variant(ws.kernel, 2))
            cands["ws8-s3"] = (fp8, variant(ws.kernel, 3))
            planning.release_buffers()
            _, launches = VARIANTS["static_grid"].plan(*batch.args(), out=out, **batch.options)
            cands["fp8-tree"] = (fp8, lambda b=batch, o=out: VARIANTS["static_grid"](*b.args(), out=o, **b.options))
        else:
            cands["ws16"] = (fp8, ws)
    errs = {}
    for label, (fp8, launch) in list(cands.items()):
        batch, out, r = ref[fp8]
        try:
            out.fill_(float("nan")); launch(); torch.cuda.synchronize()
        except Exception as e:
            print(label, "failed", repr(e)[:300]); del cands[label]; continue
        errs[label] = (out.float() - r).abs().max().item()
    times = {k: [] for k in cands}
    for rnd in range(5):
        order = list(cands) if rnd % 2 == 0 else list(reversed(list(cands)))
        for label in order:
            times[label].append(timing.time_graph(cands[label][1], samples=25).median)
    med = {k: statistics.median(v) for k, v in times.items()}
    rows.append(dict(scenario=name, ms=med, err=errs))
    print(name, " ".join(f"{k} {med[k]:.4f} (err {errs[k]:.3f})" for k in cands), flush=True)
json.dump(rows, open(sys.argv[2], "w"), indent=1)

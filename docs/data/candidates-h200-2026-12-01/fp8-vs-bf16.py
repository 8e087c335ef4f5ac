"""Each fp8 prefill against the same batch over a bf16 cache (the same spec, fp8_kv off: the same
seed, lengths and q), the public entry as a serving engine calls it (static_grid, host hints), graph replay,
L2 flushed, alternating paired rounds. Outputs poisoned and checked against the fp32 reference (fp8: of q
rounded to e4m3 too). Writes OUT/fp8-vs-bf16-<process>.json: per scenario the paired log ratios fp8/bf16."""
import dataclasses, json, math, os, statistics, sys
import torch
from kernels import VARIANTS
from kernels.batch import build_batch
from kernels.inputs import OCP_E4M3
from kernels.reference import paged_attention_reference
from perf.measure import timing
from perf.measure.cases import host_hints
from perf.measure.check import reference_output
from perf.scenarios import Scenario

proc, R = sys.argv[1], int(sys.argv[2])
names = sys.argv[3].split(",")
v = VARIANTS["static_grid"]
rows = {}
for name in names:
    spec8 = Scenario.parse(name).spec()
    spec16 = dataclasses.replace(spec8, fp8_kv=False)
    calls, errs = {}, {}
    keep = []
    for label, spec in (("bf16", spec16), ("fp8", spec8)):
        batch = build_batch(spec, "cuda", poison=True, **({"fp8_dtype": OCP_E4M3} if spec.fp8_kv else {}))
        out = batch.new_output()
        hints = host_hints(v, spec)
        call = (lambda b=batch, o=out, h=hints: v(*b.args(), out=o, **b.options, **h))
        out.fill_(float("nan")); call(); torch.cuda.synchronize()
        ref = reference_output(paged_attention_reference, batch).float()
        err = (out.float() - ref).abs().max().item()
        if spec.fp8_kv:
            refq = reference_output(paged_attention_reference, batch, round_q=True).float()
            err = min(err, (out.float() - refq).abs().max().item())
        errs[label] = err
        calls[label] = timing.capture_graph(call)
        keep.append((batch, out))
    t0 = timing.time_graph(None, samples=3, graph=calls["bf16"]).median
    samples = max(5, min(25, int(300 / max(t0, 0.01))))
    times = {k: [] for k in calls}
    for rnd in range(R):
        for label in (list(calls) if rnd % 2 == 0 else list(reversed(list(calls)))):
            times[label].append(timing.time_graph(None, samples=samples, graph=calls[label]).median)
    logs = [math.log(a / b) for a, b in zip(times["fp8"], times["bf16"])]
    rows[name] = dict(ms={k: statistics.median(t) for k, t in times.items()}, max_error=errs, rounds=times,
                      log_ratios=logs)
    print(proc, name, {k: round(statistics.median(t), 4) for k, t in times.items()},
          "fp8/bf16", round(math.exp(statistics.fmean(logs)), 4), "err", {k: round(e, 4) for k, e in errs.items()},
          flush=True)
    json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows},
              open(os.path.join(os.environ["OUT"], f"fp8-vs-bf16-{proc}.json"), "w"), indent=1)
    del keep, calls; torch.cuda.empty_cache()

"""q rounded under the last P V of the item before (the working tree then, "tail": the committed form), against the scales loaded once
(main b90e8ed, "scales", .fi/q/ws_scales.py) and a5cfca4 ("main", .fi/q/ws_head.py).
One process, alternating rounds of graph replays, outputs poisoned and checked against the fp32 reference (small) or main's."""
import statistics, sys, json, importlib.util
import torch
from kernels import VARIANTS
from kernels.batch import build_batch
from kernels.launch import KernelLaunch
from kernels.paged_attention import planning
from kernels.inputs import OCP_E4M3
from kernels.reference import paged_attention_reference
from perf.measure import timing
from perf.scenarios import Scenario

spec_ = importlib.util.spec_from_file_location("ws_head", ".fi/q/ws_head.py")
ws_head = importlib.util.module_from_spec(spec_); spec_.loader.exec_module(ws_head)
spec_ = importlib.util.spec_from_file_location("ws_c1", ".fi/q/ws_scales.py")
ws_c1 = importlib.util.module_from_spec(spec_); spec_.loader.exec_module(ws_c1)
SMS = torch.cuda.get_device_properties(0).multi_processor_count
rows = []
for name in sys.argv[1].split(","):
    sc = Scenario.parse(name)
    spec = sc.spec()
    batch = build_batch(spec, "cuda", poison=True, **({"fp8_dtype": OCP_E4M3} if spec.fp8_kv else {}))
    out = batch.new_output()
    planning.release_buffers()
    _, launches = VARIANTS["static_grid"].plan(*batch.args(), out=out, **batch.options)
    ws = [l for l in launches if l.name == "ws_prefill_kernel"]
    if not ws:
        print(name, "not the Gluon kernel:", [l.name for l in launches], flush=True)
        continue
    ws = ws[0]
    small = batch.args()[0].shape[0] <= 20000
    ref = paged_attention_reference(*batch.args(), **batch.options).float() if small else None
    items = ws.args["num_q_blocks"] * ws.args["num_q_heads"]
    def launch_of(kernel):
        return KernelLaunch(kernel, ws.grid, ws.args, ws.constexprs, ws.num_warps, ws.num_stages, ws.vendor_options)
    cands = {"main": launch_of(ws_head.ws_prefill_kernel), "scales": launch_of(ws_c1.ws_prefill_kernel),
             "tail": launch_of(ws.kernel)}
    outs = {}
    errs = {}
    for label, launch in list(cands.items()):
        for rep in range(2):  # twice: the counters must come back to zero for the second launch
            out.fill_(float("nan")); launch(); torch.cuda.synchronize()
            if ref is None:
                ref = out.float().clone()
            err = (out.float() - ref).abs().max().item()
            errs[label] = max(errs.get(label, 0.0), err) if err == err else float("nan")
            outs.setdefault(label, out.clone())
        if not (errs[label] < (0.15 if spec.fp8_kv else 0.05)):
            print(label, "WRONG", errs[label], flush=True)
    same = {k: bool(torch.equal(outs[k], outs["main"])) for k in outs}
    t0 = timing.time_graph(cands["main"], samples=3).median
    samples = max(5, min(25, int(300 / max(t0, 0.01))))
    times = {k: [] for k in cands}
    for rnd in range(int(sys.argv[3]) if len(sys.argv) > 3 else 5):
        order = list(cands) if rnd % 2 == 0 else list(reversed(list(cands)))
        for label in order:
            times[label].append(timing.time_graph(cands[label], samples=samples).median)
    med = {k: statistics.median(v) for k, v in times.items()}
    counters = planning.ticket_counters(torch.device("cuda")).tolist()
    rows.append(dict(scenario=name, items=items, sms=SMS, grid=ws.grid, ms=med, err=errs, rounds=times,
                     counters=counters, same_as_main=same))
    print(name, items, f"{items / SMS:.2f}/SM", " ".join(
        f"{k} {med[k]:.4f} ({med[k]/med['main']:.3f}, err {errs[k]:.3g})" for k in cands),
        "same", same, "counters", counters, flush=True)
    json.dump(rows, open(sys.argv[2], "w"), indent=1)
    del batch, out, ref; torch.cuda.empty_cache()

"""Each e4m3 row three ways in one process: the tree's Gluon kernel over the bf16 cache of the same lengths
("bf16", the e4m3 spec with fp8_kv off), the tree's over e4m3 ("fp8") and a candidate module's over e4m3
("cand", the file CAND names). R alternating rounds of graph replays, outputs poisoned and checked against
the fp32 reference (small) or the tree's; the candidate's bits compared with the tree's."""
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

import os
spec_ = importlib.util.spec_from_file_location("ws_cand", os.environ["CAND"])
ws_cand = importlib.util.module_from_spec(spec_); spec_.loader.exec_module(ws_cand)
rows = []
R = int(sys.argv[3]) if len(sys.argv) > 3 else 9


def prepared(name):
    import dataclasses
    bf16 = name.endswith('#bf16')
    sc = Scenario.parse(name.split('#')[0])
    spec = sc.spec()
    if bf16:  # the e4m3 row's own lengths over a bf16 cache
        spec = dataclasses.replace(spec, fp8_kv=False)
    batch = build_batch(spec, "cuda", poison=True, **({"fp8_dtype": OCP_E4M3} if spec.fp8_kv else {}))
    out = batch.new_output()
    planning.release_buffers()
    _, launches = VARIANTS["static_grid"].plan(*batch.args(), out=out, **batch.options)
    ws = [l for l in launches if l.name == "ws_prefill_kernel"]
    assert ws, (name, [l.name for l in launches])
    ws = ws[0]
    small = batch.args()[0].shape[0] <= 20000
    ref = paged_attention_reference(*batch.args(), **batch.options).float() if small else None
    return spec, batch, out, ws, ref


for fp8_name in sys.argv[1].split(","):
    bf16_name = fp8_name + "#bf16"
    cands, outs, errs, keep = {}, {}, {}, []
    for label, name, kernel in (("bf16", bf16_name, None), ("fp8", fp8_name, None), ("cand", fp8_name, ws_cand)):
        spec, batch, out, ws, ref = prepared(name)
        launch = KernelLaunch(kernel.ws_prefill_kernel if kernel else ws.kernel, ws.grid, ws.args, ws.constexprs,
                              ws.num_warps, ws.num_stages, ws.vendor_options)
        for rep in range(2):  # twice: the ticket counters must come back to zero
            out.fill_(float("nan")); launch(); torch.cuda.synchronize()
            if ref is None:
                ref = out.float().clone()
            err = (out.float() - ref).abs().max().item()
            errs[label] = max(errs.get(label, 0.0), err) if err == err else float("nan")
        outs[label] = out.clone()
        if not (errs[label] < (0.15 if spec.fp8_kv else 0.05)):
            print(label, name, "WRONG", errs[label], flush=True)
        cands[label] = launch
        keep.append((batch, out))
    same = bool(torch.equal(outs["cand"], outs["fp8"]))
    t0 = timing.time_graph(cands["bf16"], samples=3).median
    samples = max(5, min(25, int(300 / max(t0, 0.01))))
    times = {k: [] for k in cands}
    for rnd in range(R):
        order = list(cands) if rnd % 2 == 0 else list(reversed(list(cands)))
        for label in order:
            times[label].append(timing.time_graph(cands[label], samples=samples).median)
    med = {k: statistics.median(v) for k, v in times.items()}
    r_fp8 = sorted(a / b for a, b in zip(times["fp8"], times["bf16"]))
    r_c32 = sorted(a / b for a, b in zip(times["cand"], times["fp8"]))
    rows.append(dict(scenario=fp8_name, ms=med, err=errs, rounds=times, cand_same_bits_as_fp8=same,
                     fp8_over_bf16_rounds=r_fp8, cand_over_fp8_rounds=r_c32,
                     counters=planning.ticket_counters(torch.device("cuda")).tolist()))
    print(fp8_name, " ".join(f"{k} {med[k]:.4f} (err {errs[k]:.3g})" for k in cands),
          f"| fp8/bf16 median {statistics.median(r_fp8):.4f} [{r_fp8[0]:.4f}, {r_fp8[-1]:.4f}]",
          f"| cand/fp8(tree) median {statistics.median(r_c32):.4f} [{r_c32[0]:.4f}, {r_c32[-1]:.4f}] same bits {same}",
          flush=True)
    json.dump(rows, open(sys.argv[2], "w"), indent=1)
    del keep, outs; torch.cuda.empty_cache()

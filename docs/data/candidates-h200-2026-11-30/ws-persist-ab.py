"""One process: the warp-specialized kernel as on main (a program per work item, grid heads x Q-blocks),
the new one with a program per item (its loop runs once), and the new one persistent (a program per SM),
beside the tree's own choice, bf16 and e4m3 caches over the same shapes; every output checked."""
import statistics, sys, json, dataclasses, importlib.util
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

spec_ = importlib.util.spec_from_file_location("ws_main", ".fi/p/ws_main.py")
ws_main = importlib.util.module_from_spec(spec_); spec_.loader.exec_module(ws_main)
spec_ = importlib.util.spec_from_file_location("ws_v1", ".fi/p/ws_v1.py")
ws_v1 = importlib.util.module_from_spec(spec_); spec_.loader.exec_module(ws_v1)
WS = Config(128, 128, 1, num_warps=8, num_stages=2, warp_specialized=True)
SMS = torch.cuda.get_device_properties(0).multi_processor_count
rows = []
for name in sys.argv[1].split(","):
    sc = Scenario.parse(name)
    cands, ref = {}, {}
    for fp8 in (False, True):
        tag = "e4m3" if fp8 else "bf16"
        spec = dataclasses.replace(sc.spec(), fp8_kv=fp8)
        batch = build_batch(spec, "cuda", poison=True, **({"fp8_dtype": OCP_E4M3} if fp8 else {}))
        out = batch.new_output()
        ref[tag] = (batch, out, paged_attention_reference(*batch.args(), **batch.options).float())
        planning.release_buffers()
        _, [ws] = VARIANTS["static_grid"].plan(*batch.args(), out=out, config=WS, **batch.options)
        assert ws.name == "ws_prefill_kernel"
        items = ws.args["num_q_blocks"] * ws.args["num_q_heads"]
        old_args = {k: v for k, v in ws.args.items() if k not in ("num_q_heads", "alternate")}
        cands[f"{tag}-main"] = (tag, KernelLaunch(ws_main.ws_prefill_kernel, (ws.args["num_q_heads"], ws.args["num_q_blocks"]),
                                                  old_args, ws.constexprs, ws.num_warps, ws.num_stages, ws.vendor_options))
        for alt in (0, 1):
            cands[f"{tag}-alt{alt}"] = (tag, KernelLaunch(ws.kernel, (min(items, SMS),), {**ws.args, "alternate": alt},
                                                          ws.constexprs, ws.num_warps, ws.num_stages, ws.vendor_options))
        cands[f"{tag}-tree"] = (tag, lambda b=batch, o=out: VARIANTS["static_grid"](*b.args(), out=o, **b.options))
    errs = {}
    for label, (tag, launch) in list(cands.items()):
        batch, out, r = ref[tag]
        try:
            out.fill_(float("nan")); launch(); torch.cuda.synchronize()
        except Exception as e:
            print(label, "failed", repr(e)[:300], flush=True); del cands[label]; continue
        errs[label] = (out.float() - r).abs().max().item()
        if not (errs[label] < 1.0):
            print(label, "WRONG", errs[label], flush=True)
    times = {k: [] for k in cands}
    for rnd in range(int(sys.argv[3]) if len(sys.argv) > 3 else 5):
        order = list(cands) if rnd % 2 == 0 else list(reversed(list(cands)))
        for label in order:
            times[label].append(timing.time_graph(cands[label][1], samples=25).median)
    med = {k: statistics.median(v) for k, v in times.items()}
    rows.append(dict(scenario=name, ms=med, err=errs, rounds=times))
    print(name, " ".join(f"{k} {med[k]:.4f} ({errs[k]:.3f})" for k in cands), flush=True)
    json.dump(rows, open(sys.argv[2], "w"), indent=1)

"""The trailing gaps trimmed (ws_trim) and, besides, a gap's Q-block skipped once drawn (ws_trimskip, the
working tree's kernel) beside main's (e7cb63e, "tree": .fi/q/ws_tree.py) and the kernel as at b64bdfe (a program per work item, "old"). One process, 5 alternating rounds of graph
replays, outputs checked against the fp32 reference (small) or the old kernel's."""
import statistics, sys, json, importlib.util
import torch
from kernels import VARIANTS
from kernels.batch import build_batch
from kernels.launch import KernelLaunch
from kernels.paged_attention import planning
from kernels.paged_attention.heuristics import Config
from kernels.reference import paged_attention_reference
from perf.measure import timing
from perf.scenarios import Scenario

spec_ = importlib.util.spec_from_file_location("ws_main", ".fi/q/ws_main.py")
ws_main = importlib.util.module_from_spec(spec_); spec_.loader.exec_module(ws_main)
spec_ = importlib.util.spec_from_file_location("ws_strided", ".fi/q/ws_strided.py")
ws_strided = importlib.util.module_from_spec(spec_); spec_.loader.exec_module(ws_strided)
from kernels.inputs import OCP_E4M3
def _load_mod(name):
    spec_ = importlib.util.spec_from_file_location(name, f".fi/q/{name}.py")
    m = importlib.util.module_from_spec(spec_); spec_.loader.exec_module(m)
    return m
ws_tree = _load_mod("ws_tree")
CANDS = {"trim": _load_mod("ws_trim"), "trimskip": _load_mod("ws_trimskip")}
WS = Config(128, 128, 1, num_warps=8, num_stages=2, warp_specialized=True)
SMS = torch.cuda.get_device_properties(0).multi_processor_count
rows = []
for name in sys.argv[1].split(","):
    sc = Scenario.parse(name)
    spec = sc.spec()
    batch = build_batch(spec, "cuda", poison=True, **({"fp8_dtype": OCP_E4M3} if spec.fp8_kv else {}))
    out = batch.new_output()
    small = batch.args()[0].shape[0] <= 20000
    ref = paged_attention_reference(*batch.args(), **batch.options).float() if small else None
    planning.release_buffers()
    _, [ws] = VARIANTS["static_grid"].plan(*batch.args(), out=out, config=WS, **batch.options)
    assert ws.name == "ws_prefill_kernel"
    items = ws.args["num_q_blocks"] * ws.args["num_q_heads"]
    old_args = {k: v for k, v in ws.args.items() if k not in ("num_q_heads", "tickets_ptr")}
    strided_args = {**old_args, "num_q_heads": ws.args["num_q_heads"], "alternate": int(ws.args["num_seqs"] <= 2)}
    cands = {"old": KernelLaunch(ws_main.ws_prefill_kernel, (ws.args["num_q_heads"], ws.args["num_q_blocks"]),
                                 old_args, ws.constexprs, ws.num_warps, ws.num_stages, ws.vendor_options),
             **{label: KernelLaunch(m.ws_prefill_kernel, ws.grid, ws.args,
                                    ws.constexprs,
                                    ws.num_warps, ws.num_stages, ws.vendor_options) for label, m in CANDS.items()},
             "tree": KernelLaunch(ws_tree.ws_prefill_kernel, ws.grid, ws.args, ws.constexprs, ws.num_warps,
                                  ws.num_stages, ws.vendor_options)}
    errs = {}
    for label, launch in list(cands.items()):
        out.fill_(float("nan")); launch(); torch.cuda.synchronize()
        if ref is None:
            ref = out.float().clone()
        errs[label] = (out.float() - ref).abs().max().item()
        if not (errs[label] < 0.05):
            print(label, "WRONG", errs[label], flush=True)
    t0 = timing.time_graph(cands["old"], samples=3).median
    samples = max(5, min(25, int(400 / max(t0, 0.01))))
    times = {k: [] for k in cands}
    for rnd in range(int(sys.argv[3]) if len(sys.argv) > 3 else 5):
        order = list(cands) if rnd % 2 == 0 else list(reversed(list(cands)))
        for label in order:
            times[label].append(timing.time_graph(cands[label], samples=samples).median)
    med = {k: statistics.median(v) for k, v in times.items()}
    counters = planning.ticket_counters(torch.device("cuda")).tolist()
    rows.append(dict(scenario=name, items=items, sms=SMS, ms=med, err=errs, rounds=times, counters=counters))
    print(name, items, " ".join(f"{k} {med[k]:.4f} ({med[k]/med['old']:.3f}, err {errs[k]:.3g})" for k in cands), "counters", counters, flush=True)
    json.dump(rows, open(sys.argv[2], "w"), indent=1)
    del batch, out, ref; torch.cuda.empty_cache()

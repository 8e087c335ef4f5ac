"""Scratch (GPU): start and end spread of the stamped probe vs the stamped token kernel (CV ablation and full)."""
import importlib.util, json, os, statistics, sys
import torch
buf = torch.zeros(4096 * 80 * 16, dtype=torch.int64, device="cuda")
os.environ["STAMPS_ADDR"] = str(buf.data_ptr())
from kernels import VARIANTS  # noqa: E402
from kernels.batch import build_batch  # noqa: E402
from kernels.paged_attention import warp_specialized as ws, heuristics, planning  # noqa: E402
from perf import scenarios  # noqa: E402
from perf.measure.cases import host_hints  # noqa: E402
def load(f):
    s = importlib.util.spec_from_file_location(os.path.basename(f)[:-3], f)
    m = importlib.util.module_from_spec(s); s.loader.exec_module(m); return m
pm = load(".fi/v/probe_st.py")
mods = {n: load(".fi/v/%s.py" % n) for n in ("st_ECV", "st_E")}
orig = ws.ws_prefill_kernel
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
res = {"gpu": torch.cuda.get_device_name(), "rows": []}
def summ(entry_c, entry_g, first_c, exit_c, exit_g):
    t0 = entry_g.min()
    return {"first_issue_cycles_median": float((first_c - entry_c).double().median()),
            "first_issue_cycles_max": float((first_c - entry_c).double().max()),
            "exit_us_min": float((exit_g - t0).double().min()) / 1e3, "exit_us_median": float((exit_g - t0).double().median()) / 1e3,
            "exit_us_p90": float((exit_g - t0).double().quantile(0.9)) / 1e3, "exit_us_max": float((exit_g - t0).double().max()) / 1e3,
            "busy_cycles_median": float((exit_c - entry_c).double().median())}
for name in sys.argv[1].split(","):
    spec = scenarios.Scenario.parse(name).spec()
    b = build_batch(spec, "cuda"); v = VARIANTS["static_grid"]; h = host_hints(v, spec)
    out = b.new_output()
    kc, vc, bt = b.k_cache, b.v_cache, b.block_table
    kd, vd = pm.descs(kc, vc, kc.shape[1])
    heads = kc.shape[2]; items = bt.shape[0] * heads
    pout = torch.zeros(1 << 16, device="cuda")
    fns = {"probe": lambda: pm.stream_kernel[(items,)](kd, vd, bt, bt.stride(0), pout, heads, spec.kv_lens[0] // 128, TILE=128, STAGES=3, SEGS=1, TOUCH=0, num_warps=4)}
    cfg = heuristics.Config(128, 128, 1, num_warps=4, num_stages=2, warp_specialized=True, ws_token_items=True, qk_e4m3=True)
    for n in mods:
        fns[n] = lambda: v(*b.args(), out=out, config=cfg, **b.options, **h)
    row = {"scenario": name}
    for label, fn in fns.items():
        ws.ws_prefill_kernel = mods[label].ws_prefill_kernel if label in mods else orig
        planning._PLANS.clear()
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        runs = []
        for r in range(7):
            buf.zero_(); flush.zero_(); torch.cuda.synchronize()
            fn(); torch.cuda.synchronize()
            if label == "probe":
                a = buf[: items * 16].view(items, 16).cpu()
                runs.append(summ(a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4]))
            else:
                a = buf.view(4096, 80, 16).cpu()
                a = a[a[:, 78, 0] != 0]
                it = a[:, 78]
                runs.append(summ(it[:, 0], it[:, 3], a[:, 0, 12], it[:, 5], it[:, 9]))
        row[label] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(name, label, json.dumps({k: round(x, 2) for k, x in row[label].items()}), flush=True)
    ws.ws_prefill_kernel = orig
    res["rows"].append(row)
    json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "spread.json"), "w"), indent=1)

"""Scratch (GPU): phase times of the token-item kernel's partitions from .fi/ws_tok_stamps.py.
python .fi/tok_stamps_run.py SCENARIO[,..] [q1|q2]; writes $OUT/tok-stamps.json and prints medians (cycles)."""
import importlib.util, json, os, statistics, sys
import torch
buf = torch.zeros(4096 * 80 * 16, dtype=torch.int64, device="cuda")
os.environ["STAMPS_ADDR"] = str(buf.data_ptr())
from kernels import VARIANTS  # noqa: E402
from kernels.batch import build_batch  # noqa: E402
from kernels.paged_attention import warp_specialized as ws, heuristics  # noqa: E402
from perf import scenarios  # noqa: E402
from perf.measure.cases import host_hints  # noqa: E402
f = os.environ.get("STAMPS_SRC", ".fi/ws_tok_stamps.py")
spec_ = importlib.util.spec_from_file_location("stamped", f)
m = importlib.util.module_from_spec(spec_); spec_.loader.exec_module(m)
orig = ws.ws_prefill_kernel
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
rounded = (sys.argv[2] if len(sys.argv) > 2 else "q1") == "q1"
res = {"gpu": torch.cuda.get_device_name(), "rows": []}
NAMES = {0: "c.wait_k", 1: "c.S", 2: "c.softmax+P", 3: "c.wait_v", 4: "c.PV", 6: "v.wait_v8", 7: "v.wait_vempty",
         8: "v.convert", 10: "l.wait_empty", 11: "l.issue"}
for name in sys.argv[1].split(","):
    spec = scenarios.Scenario.parse(name).spec()
    b = build_batch(spec, "cuda"); v = VARIANTS["static_grid"]; h = host_hints(v, spec)
    out = b.new_output()
    cfg = heuristics.Config(128, 128, 1, num_warps=4, num_stages=2, warp_specialized=True, ws_token_items=True,
                            qk_e4m3=rounded)
    ws.ws_prefill_kernel = m.ws_prefill_kernel
    fn = lambda: v(*b.args(), out=out, config=cfg, **b.options, **h)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    runs = []
    for r in range(7):
        buf.zero_(); flush.zero_(); torch.cuda.synchronize()
        fn(); torch.cuda.synchronize()
        a = buf.view(4096, 80, 16).cpu()
        progs = a[:, 78, 0] != 0
        a = a[progs]
        P = a.shape[0]
        item = a[:, 78]
        t0g = item[:, 3].min()
        row = {"programs": P, "sms": int(item[:, 15].unique().numel()),
               "entry_ns_max": float((item[:, 3] - t0g).max()), "exit_ns_median": float((item[:, 4] - t0g).median()),
               "exit_ns_max": float((item[:, 4] - t0g).max()), "exit_ns_min": float((item[:, 4] - t0g).min()),
               "c_entry_to_q_cycles": float((item[:, 1] - item[:, 0]).median()),
               "l_entry_to_item_cycles": float((item[:, 7] - item[:, 6]).median()),
               "l_entry_minus_c_entry": float((item[:, 6] - item[:, 0]).median()),
               "c_entry_to_end_cycles": float((item[:, 2] - item[:, 0]).median()),
               "c_epilogue_to_loop_exit": float((item[:, 5] - item[:, 2]).median()),
               "l_end_minus_c_exit": float((item[:, 8] - item[:, 5]).median()),
               "exit_global_max_ns": float((torch.maximum(item[:, 9], item[:, 10]) - t0g).max()),
               "exit_global_median_ns": float((torch.maximum(item[:, 9], item[:, 10]) - t0g).median()),
               "cycles_per_ns": float(((item[:, 2] - item[:, 0]).double() / (item[:, 4] - item[:, 3]).double()).median())}
        tiles = a[:, :78]
        used = tiles[:, :, 0] != 0
        nt = int(used.sum(1).max())
        # per-phase medians over programs, steady tiles (3 .. nt-3), and over all tiles
        ph = {}
        for e, label in NAMES.items():
            d = (tiles[:, 3:nt - 3, e + 1] - tiles[:, 3:nt - 3, e]).double()
            ph[label] = float(d.median())
        ph["c.tile_period"] = float((tiles[:, 4:nt - 3, 0] - tiles[:, 3:nt - 4, 0]).double().median())
        ph["l.tile_period"] = float((tiles[:, 4:nt - 3, 10] - tiles[:, 3:nt - 4, 10]).double().median())
        ph["v.tile_period"] = float((tiles[:, 4:nt - 3, 6] - tiles[:, 3:nt - 4, 6]).double().median())
        # how far ahead: loader issue of tile t vs consumer's k ready of tile t
        ph["k_issue_to_ready"] = float((tiles[:, 3:nt - 3, 1] - tiles[:, 3:nt - 3, 12]).double().median())
        ph["first_tile_ready_from_c_entry"] = float((tiles[:, 0, 1] - item[:, 0]).double().median())
        ph["first_issue_from_l_entry"] = float((tiles[:, 0, 12] - item[:, 6]).double().median())
        ph["last_pv_to_end"] = float((item[:, 2] - tiles[torch.arange(P), used.sum(1) - 1, 5]).double().median())
        row["phases"] = ph; row["tiles"] = nt
        # the first program's full timeline (relative cycles) for a look
        if r == 0:
            p0 = tiles[0, :nt, :13] - item[0, 0]
            row["program0"] = p0.tolist()
        runs.append(row)
    ws.ws_prefill_kernel = orig
    res["rows"].append({"scenario": name, "q1": rounded, "runs": runs})
    summ = {k: statistics.median(r["phases"][k] for r in runs) for k in runs[0]["phases"]}
    top = {k: statistics.median(r[k] for r in runs) for k in runs[0] if k not in ("phases", "program0", "tiles")}
    print(name, "q1" if rounded else "q2", json.dumps(top), flush=True)
    print("  ", json.dumps({k: round(x) for k, x in summ.items()}), flush=True)
    json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), "tok-stamps.json"), "w"))

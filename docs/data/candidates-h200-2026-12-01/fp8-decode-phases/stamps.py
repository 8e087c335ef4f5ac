"""Per-program phase times of the Q-block kernel, from a copy that stamps them (mk-stamps.py). Run from the
repository root: `STAMPS_SRC=COPY.py [CLEAN=1] python stamps.py SCENARIO[,SCENARIO...]`; writes
$OUT/$STAMPS_OUT (stamps-*.json) and prints per scenario: each program's entry offset from the first program's
entry, entry -> before the middle tiles (prologue: the sequence, q, its range), the middle tiles, the edge tiles,
the epilogue to exit, and the exit offset; medians and maxima over programs, the median over 5 runs, each one
call of the launches as static_grid plans them (the reduction unstamped) after the timer's L2 flush (zeroing
256 MB, as perf/measure/timing.py does) or, with CLEAN=1, after that flush and a read of another 256 MB, which
leaves L2 holding clean lines. NVIDIA H200, 2026-12-01."""
import json, os, statistics, sys
import torch
buf = torch.zeros(1 << 16, dtype=torch.int64, device="cuda")
os.environ["STAMPS_ADDR"] = str(buf.data_ptr())
from perf.lab.source_ab import _Planned, load_candidate, swapped  # noqa: E402
from perf.scenarios import Scenario  # noqa: E402
from kernels.paged_attention import planning  # noqa: E402
mod = load_candidate(os.environ["STAMPS_SRC"])
CLEAN = os.environ.get("CLEAN", "0") == "1"
clean_buf = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
res = {"gpu": torch.cuda.get_device_name(), "rows": []}
for name in sys.argv[1].split(","):
    planning.release_buffers()
    planned = _Planned(Scenario.parse(name).spec(), "cuda")
    launches, _ = swapped(planned.launches, mod)
    for _ in range(3):
        for x in launches:
            x()
    torch.cuda.synchronize()
    runs = []
    for r in range(5):
        buf.zero_(); flush.zero_()
        if CLEAN:
            clean_buf.view(torch.int32).sum()
        torch.cuda.synchronize()
        for x in launches:
            x()
        torch.cuda.synchronize()
        a = buf.view(-1, 16).cpu()
        a = a[a[:, 0] != 0]
        t = (a[:, :5] - a[:, 0].min()).double() / 1000.0  # us from the first entry (int64 first: ns since 1970)
        t0 = 0.0
        ph = {"entry": (t[:, 0] - t0), "prologue": t[:, 1] - t[:, 0], "middle": t[:, 2] - t[:, 1],
              "edge": t[:, 3] - t[:, 2], "epilogue": t[:, 4] - t[:, 3], "exit": t[:, 4] - t0}
        cyc = (a[:, 8:13] - a[:, 8:9]).double()
        row = {k: {"median": float(v.median()), "max": float(v.max()), "min": float(v.min())} for k, v in ph.items()}
        row["programs"] = int(a.shape[0]); row["sms"] = int(a[:, 15].unique().numel())
        row["prologue_cycles_median"] = float((cyc[:, 1] - cyc[:, 0]).median())
        row["middle_cycles_median"] = float((cyc[:, 2] - cyc[:, 1]).median())
        runs.append(row)
    out = {"scenario": name, "runs": runs}
    res["rows"].append(out)
    m = {k: statistics.median(r[k]["median"] for r in runs) for k in ("entry", "prologue", "middle", "edge", "epilogue", "exit")}
    mx = {k: statistics.median(r[k]["max"] for r in runs) for k in ("entry", "prologue", "middle", "edge", "epilogue", "exit")}
    print(name, runs[0]["programs"], "programs on", runs[0]["sms"], "SMs; us median/max:",
          " ".join(f"{k} {m[k]:.2f}/{mx[k]:.2f}" for k in m), flush=True)
    json.dump(res, open(os.path.join(os.environ.get("OUT", "/tmp"), os.environ.get("STAMPS_OUT", "stamps.json")), "w"), indent=1)

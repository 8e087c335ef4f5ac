"""Scratch: does the harness's L2 flush (zero_ of 256 MB: dirty lines left in L2) charge the 134 MB fp8
decodes for writebacks? Each candidate timed as the harness does (graph replay, reps per sample from
timing.plan) after four flushes: zero (the harness's), zero then a read of another 256 MB (clean L2),
and both with one call a sample. Plus CUPTI kernel durations of lone replays."""
import json, os, random, statistics, sys, time
import torch
from perf.lab.candidates import _Scenario
from perf.lab import gather_ceiling as gc
from perf.measure import timing
from perf import roofline

OUT = os.environ.get("OUT", "/tmp/out")
ROWS = ["qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16",
        "qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16",
        "llama3-8b/decode/batch16-kv4096/block16/fp8/bf16",
        "llama3-8b/decode/batch32-kv4096/block16/fp8/bf16",
        "llama3-8b/decode/batch64-kv4096/block32/fp8/bf16"]
TOKENS = {"tokens-q1": {"warp_specialized": True, "ws_token_items": True, "qk_e4m3": True}}
READERS = ["paged s8 t32 w4 st2", "paged s1 t128 w4 st4", "dense s1 t128 w4 st3"]
zero_buf = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")
read_buf = torch.ones(64 * 1024 * 1024, dtype=torch.int32, device="cuda")
sink = torch.empty((), dtype=torch.int64, device="cuda")


def flush(mode):
    if mode.startswith("zero"):
        zero_buf.zero_()
    if "read" in mode:
        torch.sum(read_buf, dim=0, out=sink)


def time_mode(replay, mode, reps, spin_ms, samples=25):
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    for i in range(samples):
        flush(mode)
        timing._spin(spin_ms)
        starts[i].record()
        for _ in range(reps):
            replay()
        ends[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) / reps for s, e in zip(starts, ends))


def cupti_us(replay, mode, n=12):
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            flush(mode)
            timing._spin(0.05)
            replay()
        torch.cuda.synchronize()
    durs = {}
    for ev in prof.events():
        if ev.device_type.name == "CUDA" and "sum" not in ev.name.lower() and "fill" not in ev.name.lower() \
                and "sleep" not in ev.name.lower() and "zero" not in ev.name.lower():
            durs.setdefault(ev.name[:60], []).append(ev.device_time if hasattr(ev, "device_time") else ev.cuda_time)
    return {k: statistics.median(v) for k, v in durs.items()}


def main():
    os.makedirs(OUT, exist_ok=True)
    limits = roofline.measure_limits("cuda")
    doc = {"gpu": torch.cuda.get_device_name(), "copy_tb_s": limits.copy_tb_s, "rows": {}}
    print("copy", limits.copy_tb_s, flush=True)
    rng = random.Random(0)
    for name in ROWS:
        t0 = time.time()
        sc = _Scenario(name, TOKENS, "cuda")
        ready, _ = sc.ready([], "cuda")
        fns = {label: fn for label, fn, _ in ready}
        errs = dict(sc.errors)
        found, kv_bytes, spec = gc.candidates(name, segments=(1, 8), tiles=(32, 128), warps=(4,), stages=(2, 3, 4))
        for r in READERS:
            fns[r] = found[r]
        graphs = {k: timing.capture_graph(f) for k, f in fns.items()}
        plans = {k: timing.plan(g.replay) for k, g in graphs.items()}
        modes = ["zero", "zero+read", "read"]
        res = {k: {f"{m}/r{'H' if r else '1'}": [] for m in modes for r in (True, False)} for k in fns}
        for _ in range(3):
            order = [(k, m, r) for k in fns for m in modes for r in (True, False)]
            rng.shuffle(order)
            for k, m, r in order:
                p = plans[k]
                reps = p.reps if r else 1
                res[k][f"{m}/r{'H' if r else '1'}"].append(
                    1e3 * time_mode(graphs[k].replay, m, reps, p.spin_ms * reps / p.reps + 0.02))
        limit_us = 1e3 * roofline.limit_ms(spec, limits)
        row = {"limit_us": limit_us, "kv_bytes": kv_bytes, "errors": errs, "refused": sc.refused,
               "reps": {k: plans[k].reps for k in fns}, "us": {}, "cupti_us": {}}
        for k in fns:
            row["us"][k] = {mk: statistics.median(v) for mk, v in res[k].items()}
            try:
                row["cupti_us"][k] = {m: cupti_us(graphs[k].replay, m) for m in ("zero", "zero+read")}
            except Exception as e:
                row["cupti_us"][k] = str(e)[:200]
        doc["rows"][name] = row
        lines = [f"{name}: limit {limit_us:.1f} us, {time.time() - t0:.0f} s"]
        for k, d in row["us"].items():
            lines.append(f"  {k:24s} " + "  ".join(f"{mk} {v:6.1f} ({100 * limit_us / v:3.0f}%)" for mk, v in d.items())
                         + f"  cupti {row['cupti_us'][k]}")
        print("\n".join(lines), flush=True)
        with open(os.path.join(OUT, "flushmodes.json"), "w") as f:
            json.dump(doc, f, indent=1)
        del graphs, fns, found, sc
        torch.cuda.empty_cache()


main()

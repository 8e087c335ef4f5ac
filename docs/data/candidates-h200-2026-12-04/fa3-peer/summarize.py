"""table.md from the three anchor processes (anchor-N.json): per scenario the medians of ours (the tree) and
FlashAttention-3 over the processes, the range of the per-process ratios, and in how many of the 15 rounds
(5 a process) ours took longer; the geometric means a process.

    python summarize.py > table.md
"""
import json
import math
import statistics
from pathlib import Path

here = Path(__file__).parent
runs = [json.loads((here / f"anchor-{p}.json").read_text()) for p in (1, 2, 3)]
names = list(runs[0]["rows"])
print("| scenario (llama3-8b, block 16) | ours us | FlashAttention-3 us | ours / FA3, each process | rounds ours slower |")
print("|---|---|---|---|---|")
logs = [[] for _ in runs]
for name in names:
    rows = [r["rows"][name] for r in runs]
    ratios = [row["ms"]["default"] / row["ms"]["peer:flash_attn_3"] for row in rows]
    for log, ratio in zip(logs, ratios):
        log.append((name, math.log(ratio)))
    paired = [a / b for row in rows for a, b in zip(row["rounds"]["default"], row["rounds"]["peer:flash_attn_3"])]
    ours = statistics.median(row["ms"]["default"] for row in rows) * 1000
    theirs = statistics.median(row["ms"]["peer:flash_attn_3"] for row in rows) * 1000
    print(f"| {name.removeprefix('llama3-8b/').replace('/block16', '')} | {ours:.1f} | {theirs:.1f} | "
          f"{min(ratios):.3f}-{max(ratios):.3f} | {sum(x > 1 for x in paired)}/{len(paired)} |")
print()
for kind in ("", "/decode/", "/prefill/"):
    means = [math.exp(statistics.mean(v for n, v in log if kind in n)) for log in logs]
    print(f"- geometric mean of ours / FA3{', ' + kind.strip('/') + 's' if kind else ''}: "
          + ", ".join(f"{m:.3f}" for m in means) + " (processes 1-3)")
copies = ", ".join(f"{r['limits']['copy_tb_s']:.2f}" for r in runs)
print(f"- copy limit each process measured: {copies} TB/s")

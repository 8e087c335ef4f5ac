"""Tables from the three-process runs of this folder.

    python summarize.py anchor > table.md        # anchor-N.json: ours against FlashAttention-3
    python summarize.py grid > grid-table.md     # grid-N.json: each candidate's time over the tree's
    python summarize.py grid ../mixed-prompts > ../mixed-prompts/table.md   # another folder's grid-N.json
    python summarize.py grid ../pack-gqa > ../pack-gqa/table.md             # (two processes there)

anchor: per scenario the medians of ours (the tree) and FlashAttention-3 over the processes, the range of the
per-process ratios, in how many of the 15 rounds (5 a process) ours took longer, and the geometric means a
process. grid: per scenario the tree's median and each candidate's time over it, the range over the processes.
"""
import json
import math
import statistics
import sys
from pathlib import Path

here = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).parent
kind = sys.argv[1]
runs = [json.loads((here / f"{kind}-{p}.json").read_text()) for p in (1, 2, 3) if (here / f"{kind}-{p}.json").exists()]
names = list(runs[0]["rows"])
copies = ", ".join(f"{r['limits']['copy_tb_s']:.2f}" for r in runs)
if kind == "grid":
    labels = sorted({k for r in runs for row in r["rows"].values() for k in [*row["ms"], *row.get("refused", {})]}
                    - {"default"})
    print("| scenario (block 16) | tree us | " + " | ".join(f"{k} / tree" for k in labels) + " |")
    print("|---|---|" + "---|" * len(labels))
    for name in names:
        rows = [r["rows"][name] for r in runs]
        cells = []
        for k in labels:
            ratios = [row["ms"][k] / row["ms"]["default"] for row in rows if k in row["ms"]]
            cells.append(f"{min(ratios):.3f}-{max(ratios):.3f}" if ratios else "– (" + (
                rows[0]["refused"].get(k, "not timed")[:60] + ")"))
        tree = statistics.median(row["ms"]["default"] for row in rows) * 1000
        print(f"| {name.replace('/block16', '')} | {tree:.1f} | " + " | ".join(cells) + " |")
    print(f"\n- copy limit each process measured: {copies} TB/s")
    sys.exit(0)
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
for part in ("", "/decode/", "/prefill/"):
    means = [math.exp(statistics.mean(v for n, v in log if part in n)) for log in logs]
    print(f"- geometric mean of ours / FA3{', ' + part.strip('/') + 's' if part else ''}: "
          + ", ".join(f"{m:.3f}" for m in means) + " (processes 1-3)")
print(f"- copy limit each process measured: {copies} TB/s")

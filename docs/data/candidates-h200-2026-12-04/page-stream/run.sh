#!/bin/bash
# Lab, one device call: the whole-page TMA stream probe, two processes.
# The device calls: nvidia-h200, 2026-12-04 06:43-06:44 UTC (head, page, page3d at 3 and 4 stages) and 06:59-07:00 (pair added, the 537 MB row, 3 stages: page_probe_3/4.json), main 23e88a5 and 9fdc465; the probe ran from the scratch folder .fi/page/ as probe.py
set -u
export PYTHONPATH=$PWD
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.max.sm --format=csv; git log -1 --format=%h; } > $OUT/gpu.txt
for tag in 1 2; do
  timeout 270 python3 .fi/page/probe.py $tag > $OUT/probe-$tag.log 2>&1
done
grep -h failed $OUT/probe-*.log | cut -c1-400
python3 - <<'PY'
import json, glob, os, statistics as st
rows = []
for f in sorted(glob.glob(os.environ["OUT"] + "/page_probe_*.json")):
    rows += json.load(open(f))["rows"]
keys = sorted({(r["seqs"], r["kv_heads"], r["block"], r["stages"], r["mode"]) for r in rows})
for k in keys:
    us = [r["us"] for r in rows if (r["seqs"], r["kv_heads"], r["block"], r["stages"], r["mode"]) == k]
    pc = [r["pct"] for r in rows if (r["seqs"], r["kv_heads"], r["block"], r["stages"], r["mode"]) == k]
    print(k, " ".join(f"{u:.2f}" for u in us), f"pct {min(pc):.1f}-{max(pc):.1f}")
PY

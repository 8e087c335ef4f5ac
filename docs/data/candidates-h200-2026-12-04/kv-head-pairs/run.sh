#!/bin/bash
# Lab, one device call: kv_head_pairs on the GPU: its tests, then the candidates beside the tree, one process.
# The device call: nvidia-h200, 2026-12-04 07:06-07:08 UTC, the working tree of e662519 with kv-head-pairs.diff applied (the plan ran from .fi/kvp/; the device copy's git log named 23e88a5)
set -u
export PYTHONPATH=$PWD
t0=$(date +%s)
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.max.sm --format=csv; git log -1 --format=%h; } > $OUT/gpu.txt
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_kv_head_pairs.py tests/kernels/test_e4m3_pairs.py > $OUT/gpu-tests.txt 2>&1
tail -3 $OUT/gpu-tests.txt
echo "tests done at $(( $(date +%s) - t0 )) s"
timeout $(( 560 - ($(date +%s) - t0) )) python3 -m perf.lab.candidates .fi/kvp/plan.yaml --rounds 5 --out $OUT/cand > $OUT/candidates.log 2>&1
tail -60 $OUT/candidates.log | cut -c1-250
echo "done at $(( $(date +%s) - t0 )) s"

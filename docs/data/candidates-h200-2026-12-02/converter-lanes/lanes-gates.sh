#!/bin/bash
# Lab, one device call: the working tree (branch `lanes`: the converter's lanes down the rows) as head against main
# 2ce0627 as base (this machine's git is at 2ce0627, so the change is uncommitted there: --allow-dirty): the Gluon
# kernel's GPU tests, then the latency gates over the rows the change plans named on the CPU (pr 1, anchor 2,
# nightly 4; static_grid, graph replay).
set -u
export PYTHONPATH=$PWD
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
git log --oneline -1 >> $OUT/gpu.txt; git status --short >> $OUT/gpu.txt
timeout 240 python3 -m pytest -q -p no:cacheprovider -n 8 --dist loadgroup tests/kernels/test_warp_specialized.py 2>&1 | tail -4 > $OUT/gpu-tests.txt
cat $OUT/gpu-tests.txt; echo "tests done at $(( $(date +%s) - t0 )) s"
run_gate() {
  s=$1; rows=$2
  timeout 300 python3 -m perf gate --base-ref 2ce0627 --allow-dirty --suite $s --variants static_grid --metrics graph \
    --scenarios "$rows" --out /tmp/gate-$s > $OUT/gate-$s.log 2>&1
  echo "gate $s rc=$? at $(( $(date +%s) - t0 )) s"
  cp /tmp/gate-$s/report.md $OUT/gate-$s.md 2>/dev/null; cp /tmp/gate-$s/findings.json $OUT/gate-$s.json 2>/dev/null
  tail -2 $OUT/gate-$s.log
}
run_gate pr 'llama3-8b/prefill/batch8-kv1024/block16/fp8'
run_gate anchor 'llama3-8b/prefill/batch1-kv8192/block16/fp8/bf16,llama3-8b/prefill/batch4-kv2048/block16/fp8/bf16'
run_gate nightly 'llama3-8b/mixed50/batch16-kv4096-var/block16/fp8,llama3-8b/mixed50/batch16-kv4096-var/block16/fp8/bf16,llama3-8b/mixed50/batch16-kv4096-var-chunk512/block16/fp8,llama3-8b/mixed50/batch16-kv4096-var-chunk512/block16/fp8/bf16'

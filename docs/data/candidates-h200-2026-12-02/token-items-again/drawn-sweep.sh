#!/bin/bash
# Lab, one device call: the token-items branch sweep (.fi/br/plan.yaml) in three processes, production entry, each
# candidate checked on a poisoned output first.
set -u
export PYTHONPATH=$PWD
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
for p in 1 2 3; do
  timeout 170 python3 -m perf.lab.candidates .fi/br/plan.yaml --rounds 5 --out /tmp/sweep$p > /tmp/sweep$p.log 2>&1
  tail -2 /tmp/sweep$p.log
  cp /tmp/sweep$p/*.md $OUT/sweep$p.md 2>/dev/null; cp /tmp/sweep$p/*.json $OUT/ 2>/dev/null
  for f in /tmp/sweep$p/*.json; do cp $f $OUT/sweep$p-$(basename $f); done
  echo "process $p done at $(( $(date +%s) - t0 )) s"
done

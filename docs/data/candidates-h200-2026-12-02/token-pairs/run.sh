#!/bin/bash
# Lab, one device call: GPU tests of the token items (tiles of 64, segments), then the pairs plan in one process.
set -u
export PYTHONPATH=$PWD
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
timeout ${TEST_S:-200} python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_warp_specialized.py -k "token" > $OUT/gpu-tests.txt 2>&1
tail -3 $OUT/gpu-tests.txt
echo "tests done at $(( $(date +%s) - t0 )) s"
timeout ${PLAN_S:-330} python3 -m perf.lab.candidates ${PLAN:-.fi/pairs/plan.yaml} --rounds ${ROUNDS:-5} --out $OUT/cand > /tmp/cand.log 2>&1
tail -5 /tmp/cand.log; cp /tmp/cand.log $OUT/
echo "plan done at $(( $(date +%s) - t0 )) s"

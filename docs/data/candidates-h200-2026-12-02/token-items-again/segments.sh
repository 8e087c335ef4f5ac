#!/bin/bash
# Lab, one device call: the token items in segments merged in the kernel (`Config.ws_token_segments`): the Gluon
# kernel's token-item GPU tests, then the segments beside the whole items and the tree (`perf.lab.candidates`,
# production entry, each candidate checked on a poisoned output first, 5 rounds).
set -u
export PYTHONPATH=$PWD
t0=$(date +%s)
timeout 150 python3 -m pytest -q -x -p no:cacheprovider tests/kernels/test_warp_specialized.py -k "token" 2>&1 | tail -6 | tee $OUT/gpu-tests.txt
echo "tests done at $(( $(date +%s) - t0 )) s"
timeout 170 python3 -m perf.lab.candidates .fi/seg/plan.yaml --rounds 5 --out /tmp/seg > /tmp/seg.log 2>&1
tail -3 /tmp/seg.log
cp /tmp/seg/*.md $OUT/ 2>/dev/null; cp /tmp/seg/*.json $OUT/ 2>/dev/null
grep "|" /tmp/seg/*.md | cut -c1-160
echo "all done at $(( $(date +%s) - t0 )) s"

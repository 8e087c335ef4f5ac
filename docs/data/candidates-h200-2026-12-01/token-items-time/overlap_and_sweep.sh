#!/bin/bash
# device (nvidia-h200, one call, 112 s): the consumer with P V under its softmax (mk_overlap.py) timed beside the
# tree's token items (variants.py), its correctness (overlap_check.py), then the token-items branch sweep
# (branch-sweep-plan.yaml) with the candidate in place of the tree's module when its check passed. Run from the
# repository root: bash docs/data/candidates-h200-2026-12-01/token-items-time/overlap_and_sweep.sh
export PYTHONPATH=.
D=docs/data/candidates-h200-2026-12-01/token-items-time
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >> $OUT/steps.txt 2>&1
python $D/mk_overlap.py /tmp/ws_overlap.py || exit 2
S=$(date +%s)
python $D/variants.py qwen2.5-7b/decode/batch32-kv4096/block16/fp8/bf16,qwen2.5-7b/decode/batch32-kv4096/block32/fp8/bf16,llama3-8b/decode/batch16-kv4096/block16/fp8/bf16,llama3-8b/decode/batch32-kv4096/block16/fp8/bf16 kernels/paged_attention/warp_specialized.py,/tmp/ws_overlap.py > $OUT/variants.log 2>&1
echo "variants $(( $(date +%s) - S )) s" >> $OUT/steps.txt
S=$(date +%s)
python $D/overlap_check.py /tmp/ws_overlap.py > $OUT/check.log 2>&1; rc=$?
echo "check rc=$rc $(( $(date +%s) - S )) s" >> $OUT/steps.txt
if [ $rc = 0 ]; then cp /tmp/ws_overlap.py kernels/paged_attention/warp_specialized.py; echo "sweep with overlap" >> $OUT/steps.txt; fi
S=$(date +%s)
mkdir -p $OUT/sweep
python -m perf.lab.candidates $D/branch-sweep-plan.yaml --out $OUT/sweep > $OUT/sweep.log 2>&1
echo "sweep rc=$? $(( $(date +%s) - S )) s" >> $OUT/steps.txt

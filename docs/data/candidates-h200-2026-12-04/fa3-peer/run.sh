#!/usr/bin/env bash
# The device command (nvidia-h200): FlashAttention-3's reduced sm_90a build (made on a CPU by build.sh, carried
# as .fi/fa3/pkg) imported, then plan.yaml timed beside it and its lab forms (fa3-forms.py) in one process.
set -uo pipefail
d=docs/data/candidates-h200-2026-12-04/fa3-peer
export PYTHONPATH=$PWD/.fi/fa3/pkg:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUT/gpu.txt"
python -c "import torch, flash_attn_interface; from perf.peers import library_version as v
print(torch.__version__, torch.version.cuda, 'flash_attn_3', v('flash_attn_interface'))" > "$OUT/import.txt" 2>&1
cat "$OUT/gpu.txt" "$OUT/import.txt"
# a kernel this reduced build lacks (a bf16 cache): a refusal with its reason, in a process of its own
python -c "from perf.measure.peer_cases import make_case; from perf.scenarios import Scenario
print(make_case('flash_attn_3', Scenario.parse('llama3-8b/decode/batch2-kv64/block16/bf16'), 'cuda').skip)" \
  > "$OUT/refusal.txt" 2>&1; echo "exit $?" >> "$OUT/refusal.txt"; cat "$OUT/refusal.txt"
forms=flash_attn_3,fa3_kernel,fa3_kernel_split1,fa3_kernel_split2,fa3_kernel_split3,fa3_kernel_split4,fa3_kernel_split8
timeout $((585 - SECONDS)) python "$d/fa3-forms.py" "$d/plan.yaml" --peers "$forms" --out "$OUT/cand" \
  > "$OUT/candidates.txt" 2>&1
tail -70 "$OUT/candidates.txt"

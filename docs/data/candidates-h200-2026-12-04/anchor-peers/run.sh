#!/usr/bin/env bash
# The peers table of 2026-12-04 (nvidia-h200) with flashinfer's XQA decode among the peers: FlashInfer 0.7.4's
# kernels compiled for sm_90a first, six processes at once (docs/data/candidates-h200-2026-12-04/xqa/warm.py on a
# small case of each kind the anchor has), then perf/peer_table.sh (3 processes, 3 repeats) into .fi/peers (its
# unpacked libraries are large), whose results files and table are copied to $OUT/peers; it continues files that
# exist (carry a folder carried-peers/ of them back in to go on after a time limit). Carried: the archives
# .fi/bundle/flashinfer-site.tar.xz and .fi/vllm/vllm-triton.tar.gz (docs/peers.md, "Peers on a machine without a
# package index"). Two calls ran it:
#   run.sh                      05:47 UTC, main b9b908d: this folder's files
#   FA3=.fi/fa3/pkg run.sh      16:35 UTC, main 3645557 with [ws-large-batches] uncommitted, FlashAttention-3 among
#                               the peers (the build of ../fa3-peer/build.sh, carried too): ../peers-fa3/
set -uo pipefail
w=docs/data/candidates-h200-2026-12-04/xqa/warm.py
# where peer_table.sh unpacks it too: FlashInfer's JIT rebuilds a module whose source paths differ
mkdir -p .fi/peers/site && tar xJf .fi/bundle/flashinfer-site.tar.xz -C .fi/peers/site --strip-components=1
export FLASHINFER_WORKSPACE_BASE=$PWD/.fi/jit TVM_FFI_CACHE_DIR=$PWD/.fi/tvmffi FLASHINFER_CUDA_ARCH_LIST=9.0a \
  MAX_JOBS=16
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$OUT/gpu.txt"
git log --oneline -1 >> "$OUT/gpu.txt"
i=0
for s in llama3-8b/prefill/batch1-kv2048/block16/bf16 llama3-8b/decode/batch1-kv1024/block16/bf16 \
         llama3-8b/prefill/batch4-kv2048/block16/fp8/bf16 llama3-8b/decode/batch32-kv8192/block16/fp8/bf16 \
         llama3-8b/decode/batch1-kv8192-q4/block16/bf16 llama3-8b/prefill/batch16-kv512/block16/bf16; do
  i=$((i + 1))
  PYTHONPATH=$PWD/.fi/peers/site:$PWD timeout 300 python "$w" "$s" > ".fi/warm-$i.txt" 2>&1 &
done
wait
cat .fi/warm-*.txt > "$OUT/warm.txt"  # the device returns 8 files at most
grep -h "set up" "$OUT/warm.txt"
mkdir -p "$OUT/peers"
[ -d carried-peers ] && cp -n carried-peers/run-*.jsonl .fi/peers/ 2>/dev/null
PYTHON=python timeout $((590 - SECONDS)) perf/peer_table.sh --flashinfer .fi/bundle/flashinfer-site.tar.xz \
  --vllm .fi/vllm/vllm-triton.tar.gz --vllm-version 0.33.0 ${FA3:+--fa3 "$FA3"} --processes 3 --repeats 3 \
  --out .fi/peers > "$OUT/peer_table.txt" 2>&1
echo "peer_table.sh exit $? at $SECONDS s"
cp .fi/peers/run-*.jsonl .fi/peers/table.md "$OUT/peers/" 2>/dev/null
tail -5 "$OUT/peer_table.txt"; ls -la "$OUT/peers"

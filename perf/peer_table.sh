#!/usr/bin/env bash
# The peers table of docs/peers.md in one command, on one NVIDIA GPU: ours (static_grid)
# against FlashInfer (its paged wrappers, and for decodes the XQA kernel it ships),
# FlashAttention-3 (where it imports) and vLLM's Triton unified attention over the `anchor`
# suite (the paper's 17 cases, multi-token decodes, fp8 prefills), CUDA-graph replay medians. `perf run` checks
# every output before it times it (perf/measure); a peer that cannot run a case, or runs it
# wrong, is left out of that row with the reason under the table.
#
#   perf/peer_table.sh [--flashinfer SITE.tar.xz] [--vllm VLLM.tar.gz] [--vllm-version V] [--fa3 DIR]
#                      [--processes N] [--repeats R] [--suite S] [--metrics M] [--out DIR] [--docs FILE.md]
#
# --flashinfer, --vllm: archives of the two libraries for a GPU machine without a package index
#   (docs/peers.md, "Peers on a machine without a package index"), unpacked into DIR/site and
#   put first on PYTHONPATH; without them the installed libraries are measured. --vllm-version
#   names the version of a vLLM copy that carries no package metadata, for the table's notes.
# --fa3: a folder holding a FlashAttention-3 build (flash_attn_interface.py and flash_attn_3/, as
#   docs/peers.md's build makes it), put first on PYTHONPATH; without it an installed one is measured.
# N processes (default 3, what a paired verdict per scenario needs), each one `perf run` into
#   DIR/run-<i>.jsonl: a fresh process per file, so what a process adds lands in the variance.
#   A file that exists is continued, so the command picks up where an interrupted one stopped;
#   remove DIR to measure afresh.
# Then `perf table` over all of them, with the ratios to each peer and each latency's % of the
#   GPU's limit (copy bandwidth and matmul peak, measured once per GPU: perf/roofline.py), into
#   DIR/table.md and, with --docs (docs/peers.md), between that page's markers for the suite.
set -euo pipefail

flashinfer="" vllm="" vllm_version="" fa3="" processes=3 repeats=5 suite=anchor metrics=graph out=results/peers docs=""
usage() { sed -n '8,9p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --flashinfer) flashinfer=${2:?}; shift 2 ;;
    --vllm) vllm=${2:?}; shift 2 ;;
    --vllm-version) vllm_version=${2:?}; shift 2 ;;
    --fa3) fa3=${2:?}; shift 2 ;;
    --processes) processes=${2:?}; shift 2 ;;
    --repeats) repeats=${2:?}; shift 2 ;;
    --suite) suite=${2:?}; shift 2 ;;
    --metrics) metrics=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --docs) docs=${2:?}; shift 2 ;;
    *) echo "error: perf/peer_table.sh: unknown argument $1" >&2; usage ;;
  esac
done
case "$processes" in ''|*[!0-9]*|0) echo "error: --processes $processes: a count >= 1" >&2; exit 2 ;; esac
python=${PYTHON:-python}
abs() { [ -z "$1" ] || realpath -m -- "$1"; }  # paths as the caller named them, before the cd
flashinfer=$(abs "$flashinfer") vllm=$(abs "$vllm") fa3=$(abs "$fa3") out=$(abs "$out") docs=$(abs "$docs")
cd "$(dirname "$0")/.."
mkdir -p "$out/site"
site=$(cd "$out/site" && pwd)

if [ -n "$flashinfer" ]; then  # the archive holds site/<packages>
  [ -f "$flashinfer" ] || { echo "error: --flashinfer $flashinfer: no such file" >&2; exit 2; }
  tar xJf "$flashinfer" -C "$site" --strip-components=1
  # FlashInfer compiles its kernels with nvcc at first use (minutes), kept here for the next run
  export FLASHINFER_WORKSPACE_BASE=${FLASHINFER_WORKSPACE_BASE:-$site/../flashinfer-jit}
  export TVM_FFI_CACHE_DIR=${TVM_FFI_CACHE_DIR:-$site/../tvm-ffi}
  export FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0a} MAX_JOBS=${MAX_JOBS:-16}
fi
if [ -n "$vllm" ]; then  # the archive holds vllm/ (the kernel files and stand-ins)
  [ -f "$vllm" ] || { echo "error: --vllm $vllm: no such file" >&2; exit 2; }
  tar xzf "$vllm" -C "$site"
  if [ -n "$vllm_version" ] && [ ! -s "$site/vllm/__init__.py" ]; then
    echo "__version__ = \"$vllm_version\"  # as named by perf/peer_table.sh --vllm-version" \
      > "$site/vllm/__init__.py"
  fi
fi
if [ -n "$fa3" ]; then
  [ -f "$fa3/flash_attn_interface.py" ] || { echo "error: --fa3 $fa3: no flash_attn_interface.py" >&2; exit 2; }
fi
export PYTHONPATH="${fa3:+$fa3:}$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"

peers=flashinfer_paged,flashinfer_xqa,flash_attn_3,vllm_unified
runs=()
for i in $(seq 1 "$processes"); do
  echo "== process $i of $processes: python -m perf run --suite $suite --metrics $metrics" >&2
  "$python" -m perf run --suite "$suite" --variants static_grid --peers "$peers" --metrics "$metrics" \
    --repeats "$repeats" --out "$out/run-$i.jsonl"
  runs+=("$out/run-$i.jsonl")
done
"$python" -m perf table "${runs[@]}" --against "$peers" --out "$out/table.md" ${docs:+--docs "$docs"}

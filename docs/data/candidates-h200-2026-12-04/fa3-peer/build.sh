#!/usr/bin/env bash
# A reduced FlashAttention-3 for the peer (perf/peers.py `flash_attn_3`), built on a CPU for sm_90a: the forward
# kernels over paged caches whose pages TMA cannot take (pages of 16-32 keys), bf16 and e4m3, head size 128
# (flash-attention's hopper/ at 0251105, its CUTLASS submodule at 7127592, their snapshots' git directories given),
# the split combine and the scheduler, the torch stable-ABI API; the other instantiations its dispatch names throw
# when called (stubs.cu). nvcc 13.0, g++, 2 cores: about 5 min.
#
#     bash build.sh FLASH_ATTENTION_GIT CUTLASS_GIT TORCH_DIR PYTHON_INCLUDE OUT
#
# TORCH_DIR: an installed torch package (a CPU build will do: its headers target torch 2.9's stable ABI, and its
# libraries only give the extension the names of torch's, as torch's own extension builder does, so that it finds
# their symbols in the GPU machine's torch; libtorch_cuda.so, which a CPU build lacks, is named by an empty stand-in).
set -euo pipefail
fa_git=$1 cutlass_git=$2 torch_dir=$(realpath "$3") py_inc=$(realpath "$4") out=$(realpath -m "$5")
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
mkdir -p "$work/cutlass" "$work/obj"
# the snapshots lack some binary files outside these folders, which git archive reports: the test below stands
git -C "$fa_git" archive 0251105a2fb19d2957484b7f023cd8c115286ced hopper 2>/dev/null | tar x -C "$work" || true
git -C "$cutlass_git" archive 7127592069c2fe01b041e174ba4345ef9b279671 include 2>/dev/null \
  | tar x -C "$work/cutlass" || true
test -f "$work/hopper/flash_api_stable.cpp" && test -f "$work/cutlass/include/cute/tensor.hpp"
cd "$work"
# the features hopper/setup.py turns off by these names (FLASH_ATTENTION_DISABLE_*)
flags="-DFLASHATTENTION_DISABLE_BACKWARD -DFLASHATTENTION_DISABLE_APPENDKV -DFLASHATTENTION_DISABLE_LOCAL
 -DFLASHATTENTION_DISABLE_SOFTCAP -DFLASHATTENTION_DISABLE_FP16 -DFLASHATTENTION_DISABLE_CLUSTER
 -DFLASHATTENTION_DISABLE_HDIM64 -DFLASHATTENTION_DISABLE_HDIM96 -DFLASHATTENTION_DISABLE_HDIM192
 -DFLASHATTENTION_DISABLE_HDIM256 -DFLASHATTENTION_DISABLE_SM8x -DFLASHATTENTION_DISABLE_HDIMDIFF64
 -DFLASHATTENTION_DISABLE_HDIMDIFF192"
# hopper/setup.py's nvcc flags, with those torch's extension builder adds
nvcc_one() {
  nvcc -O3 -std=c++17 --use_fast_math --expt-relaxed-constexpr --expt-extended-lambda -lineinfo --resource-usage \
    -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__ \
    -D__CUDA_NO_HALF2_OPERATORS__ -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -DCUTLASS_ENABLE_GDC_FOR_SM90 \
    -DCUTLASS_DEBUG_TRACE_LEVEL=0 -DNDEBUG -gencode arch=compute_90a,code=sm_90a -Xcompiler -fPIC \
    -I hopper -I cutlass/include $flags -c "$1" -o "obj/$2.o" > "obj/$2.log" 2>&1
}
for dtype in e4m3 bf16; do
  nvcc_one "hopper/instantiations/flash_fwd_hdim128_${dtype}_paged_split_sm90.cu" "${dtype}_paged_split" &
  nvcc_one "hopper/instantiations/flash_fwd_hdim128_${dtype}_paged_sm90.cu" "${dtype}_paged" &
  wait
done
nvcc_one hopper/flash_fwd_combine.cu combine &
nvcc_one hopper/flash_prepare_scheduler.cu scheduler &
nvcc_one "$here/stubs.cu" stubs &
g++ -O3 -std=c++17 -fPIC -DPy_LIMITED_API=0x03090000 -DTORCH_TARGET_VERSION=0x0209000000000000 $flags \
  -I hopper -I cutlass/include -I "$torch_dir/include" -I "$py_inc" -I /usr/local/cuda/include \
  -c hopper/flash_api_stable.cpp -o obj/api.o > obj/api.log 2>&1
wait
mkdir -p "$out/flash_attn_3" "$out/flash_attn_3-3.0.0+0251105.dist-info"
gcc -shared -x c /dev/null -Wl,-soname,libtorch_cuda.so -o obj/libtorch_cuda.so
g++ -shared -o "$out/flash_attn_3/_C.abi3.so" obj/*.o -L/usr/local/cuda/lib64 -lcudart -Wl,--no-as-needed \
  -L "$torch_dir/lib" -Lobj -lc10 -ltorch -ltorch_cpu -ltorch_cuda
touch "$out/flash_attn_3/__init__.py"
cp hopper/flash_attn_interface.py "$out/"
cp "$here/flash_attn_config.py" "$out/"
printf 'Metadata-Version: 2.1\nName: flash_attn_3\nVersion: 3.0.0+0251105\n' \
  > "$out/flash_attn_3-3.0.0+0251105.dist-info/METADATA"
grep -h "registers\|spill" obj/*_paged*.log | sort | uniq -c
rm -rf "$work"

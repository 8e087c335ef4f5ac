"""Write a copy of kernels/paged_attention/common.py (or of SRC, a candidate) whose Q-block kernel stores
%globaltimer and %clock64 at five points of each program (entry, before the middle tiles, after them, after the
edge tiles, exit) and %smid, at STAMPS_ADDR (an int64 device buffer of 16 words a program, from the environment).
Run from the repository root: `python mk-stamps.py SRC DST` (stamps.py times DST). NVIDIA H200, 2026-12-01."""
import re, sys
src = open(sys.argv[1] if len(sys.argv) > 1 else "kernels/paged_attention/common.py").read()
helper = '''
import os as _os
STAMPS_ADDR: tl.constexpr = tl.constexpr(int(_os.environ.get("STAMPS_ADDR", "0")))


@triton.jit
def stamp(SLOT: tl.constexpr):
    pid = tl.program_id(0) + tl.num_programs(0) * (tl.program_id(1) + tl.num_programs(1) * tl.program_id(2))
    base = tl.full([], STAMPS_ADDR, tl.int64).to(tl.pointer_type(tl.int64)) + pid.to(tl.int64) * 16
    t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [pid], dtype=tl.int64, is_pure=False, pack=1)
    c = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,r", [pid], dtype=tl.int64, is_pure=False, pack=1)
    tl.store(base + SLOT, t)
    tl.store(base + 8 + SLOT, c)
    if SLOT == 0:
        s = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [pid], dtype=tl.int32, is_pure=True, pack=1)
        tl.store(base + 15, s.to(tl.int64))

'''
anchor = "\n\n@triton.jit\ndef token_bound("
assert anchor in src
src = src.replace(anchor, "\n" + helper + anchor, 1)
# entry
k = src.index("def q_block_kernel(")
e = src.index("    if V_STRIDES_OF_K:\n", k)
src = src[:e] + "    stamp(0)\n" + src[e:]
# exit
x = src.index("    if LAUNCH_DEPENDENTS:  # after this program's items", k)
src = src[:x] + "    stamp(4)\n" + src[x:]
# around the middle and edge tiles in attend_rows
r = src.index("def attend_rows(")
mid = src.index("    acc, m_i, l_i = attend_tiles(\n        acc, m_i, l_i, q, tl.maximum(full_lo, seg_lo)", r)
src = src[:mid] + "    stamp(1)\n" + src[mid:]
edge = src.index("    # The causal edge in tiles of EDGE_TILE keys", r)
src = src[:edge] + "    stamp(2)\n" + src[edge:]
fp8 = src.index("    if FP8_PRODUCTS:  # P was 2^top times larger", r)
src = src[:fp8] + "    stamp(3)\n" + src[fp8:]
open(sys.argv[2], "w").write(src)
print("ok", src.count("stamp("))

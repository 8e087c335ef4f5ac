"""Scratch: write .fi/ws_tok_stamps.py (or argv[2]) from a warp_specialized.py (argv[1]): the token-item
partitions store %clock64 at each phase of each tile (and %globaltimer at the consumer's entry and exit) at
STAMPS_ADDR, 80 tiles x 16 events a program."""
import sys
src = open(sys.argv[1] if len(sys.argv) > 1 else "kernels/paged_attention/warp_specialized.py").read()
out = sys.argv[2] if len(sys.argv) > 2 else ".fi/ws_tok_stamps.py"
helper = '''
import os as _os
STAMPS_ADDR = gl.constexpr(int(_os.environ.get("STAMPS_ADDR", "0")))
STAMP_TILES = gl.constexpr(80)


@gluon.jit
def _stamp(t, EVENT: gl.constexpr, GLOBAL: gl.constexpr = False):
    pid = gl.program_id(0)
    if GLOBAL:
        c = gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [pid], dtype=gl.int64, is_pure=False,
                                      pack=1)
    else:
        c = gl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,r", [pid], dtype=gl.int64, is_pure=False,
                                      pack=1)
    base = (pid.to(gl.int64) * 0 + STAMPS_ADDR).to(gl.pointer_type(gl.int64))
    idx = pid.to(gl.int64) * (STAMP_TILES * 16) + gl.minimum(t, STAMP_TILES - 1).to(gl.int64) * 16 + EVENT
    gl.store(base + idx, c)


@gluon.jit
def _stamp_sm():
    pid = gl.program_id(0)
    c = gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r,r", [pid], dtype=gl.int32, is_pure=True, pack=1)
    base = (pid.to(gl.int64) * 0 + STAMPS_ADDR).to(gl.pointer_type(gl.int64))
    gl.store(base + pid.to(gl.int64) * (STAMP_TILES * 16) + 78 * 16 + 15, c.to(gl.int64))

'''
def rep(old, new, count=1):
    global src
    assert src.count(old) == count, (old, src.count(old))
    src = src.replace(old, new)

rep("\n\n@gluon.jit\ndef locate(", "\n" + helper + "\n@gluon.jit\ndef locate(")
# consumer
c0 = src.index("def _consume_tokens(")
body = src[c0:]
def crep(old, new):
    global body
    assert body.count(old) >= 1, old
    body = body.replace(old, new, 1)
crep("    done = 0\n    n = 0\n    head, first,", "    done = 0\n    n = 0\n    _stamp(78, 0)\n    _stamp(78, 3, True)\n    _stamp_sm()\n    head, first,")
crep("    while n_tiles >= 0:\n", "    _stamp(78, 1)\n    while n_tiles >= 0:\n")
crep("            mbarrier.wait(k_ready.index(stage), (t // STAGES_) & 1)\n            s = warpgroup_mma(k_bufs",
     "            _stamp(t, 0)\n            mbarrier.wait(k_ready.index(stage), (t // STAGES_) & 1)\n            _stamp(t, 1)\n            s = warpgroup_mma(k_bufs")
crep("            s = warpgroup_mma_wait(0, deps=(s, ))\n", "            s = warpgroup_mma_wait(0, deps=(s, ))\n            _stamp(t, 2)\n")
crep("            mbarrier.wait(v_ready.index(stage), (t // STAGES_) & 1)\n",
     "            _stamp(t, 3)\n            mbarrier.wait(v_ready.index(stage), (t // STAGES_) & 1)\n            _stamp(t, 4)\n")
crep("            acc = warpgroup_mma_wait(0, deps=(acc, ))\n", "            acc = warpgroup_mma_wait(0, deps=(acc, ))\n            _stamp(t, 5)\n")
crep("        gl.store(out_ptr + offsets, o.to(out_ptr.dtype.element_ty), mask=gl.expand_dims(heads < count, 0))\n",
     "        gl.store(out_ptr + offsets, o.to(out_ptr.dtype.element_ty), mask=gl.expand_dims(heads < count, 0))\n        _stamp(78, 2)\n        _stamp(78, 4, True)\n")
tail = "        head, first, count, row, context, kv_len, n_tiles, shift = _take_rounded(info, q_bar, q_empty, q_smem,\n                                                                                 q8_smem, n, 0)\n"
i = body.rindex(tail)
body = body[:i + len(tail)] + "    _stamp(78, 5)\n    _stamp(78, 9, True)\n" + body[i + len(tail):]
src = src[:c0] + body
# converter (shared body: stamps only when ROWS == TOKEN_CONVERT_ROWS, i.e. the token converter)
c0 = src.index("def _convert_tiles(")
body = src[c0:]
crep("            mbarrier.wait(v8_ready.index(slot), (t // SLOTS) & 1)\n            mbarrier.wait(v_empty.index(stage), ((t // STAGES_) & 1) ^ 1)\n",
     "            _stamp(t, 6)\n            mbarrier.wait(v8_ready.index(slot), (t // SLOTS) & 1)\n            _stamp(t, 7)\n            mbarrier.wait(v_empty.index(stage), ((t // STAGES_) & 1) ^ 1)\n            _stamp(t, 8)\n")
crep("            mbarrier.arrive(v_ready.index(stage), count=1)\n", "            mbarrier.arrive(v_ready.index(stage), count=1)\n            _stamp(t, 9)\n")
src = src[:c0] + body
# loader
c0 = src.index("def _copy_token_tile(")
body = src[c0:]
crep("    mbarrier.wait(k_empty.index(stage), ((t // STAGES_) & 1) ^ 1)  # a fresh barrier passes phase 1\n    mbarrier.wait(v8_empty.index(slot), ((t // SLOTS) & 1) ^ 1)\n",
     "    _stamp(t, 10)\n    mbarrier.wait(k_empty.index(stage), ((t // STAGES_) & 1) ^ 1)  # a fresh barrier passes phase 1\n    mbarrier.wait(v8_empty.index(slot), ((t // SLOTS) & 1) ^ 1)\n    _stamp(t, 11)\n")
crep("                                        v8_bufs.index(slot).slice(i * BLOCK, BLOCK))\n\n",
     "                                        v8_bufs.index(slot).slice(i * BLOCK, BLOCK))\n    _stamp(t, 12)\n\n")
src = src[:c0] + body
c0 = src.index("def _load_items(")
body = src[c0:]
crep("    w = gl.program_id(0)\n", "    w = gl.program_id(0)\n    _stamp(78, 6)\n")
crep("            head, col, table, first, count, row, context, kv_len, n_tiles = _token_item(w, work, TILE_, BLOCK,\n                                                                                         D)\n",
     "            head, col, table, first, count, row, context, kv_len, n_tiles = _token_item(w, work, TILE_, BLOCK,\n                                                                                         D)\n            _stamp(78, 7)\n")
src = src[:c0] + body
i = src.index("\n\n@gluon.jit\ndef _convert_v(")
src = src[:i] + "\n    _stamp(78, 8)\n    _stamp(78, 10, True)" + src[i:]
open(out, "w").write(src)
print("wrote", out)

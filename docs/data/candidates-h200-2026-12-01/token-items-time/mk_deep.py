"""Scratch: the token kernel with fp16 V's stages apart from K's: K STAGES (plan), V staging SLOTS, fp16 V VST.
python .fi/mk_deep.py IN OUT K SLOTS VST"""
import sys
src = open(sys.argv[1]).read(); out = sys.argv[2]; K, SL, VS = map(int, sys.argv[3:6])
def rep(old, new, n=1):
    global src
    assert src.count(old) == n, (old, src.count(old))
    src = src.replace(old, new)
rep("TOKEN_STAGES = 3\nTOKEN_SLOTS = gl.constexpr(3)\n", "TOKEN_STAGES = %d\nTOKEN_SLOTS = gl.constexpr(%d)\nTOKEN_V_STAGES = gl.constexpr(%d)\n" % (K, SL, VS))
c0 = src.index("def _consume_tokens(")
c1 = src.index("@gluon.jit", c0)
body = src[c0:c1]
body = body.replace("    STAGES_: gl.constexpr = k_bufs.type.shape[0]\n", "    STAGES_: gl.constexpr = k_bufs.type.shape[0]\n    V_STAGES: gl.constexpr = v_bufs.type.shape[0]\n", 1)
assert body.count("mbarrier.wait(v_ready.index(stage), (t // STAGES_) & 1)") == 1
body = body.replace("mbarrier.wait(v_ready.index(stage), (t // STAGES_) & 1)", "mbarrier.wait(v_ready.index(t % V_STAGES), (t // V_STAGES) & 1)")
assert body.count("v_bufs.index(stage)") == 1
body = body.replace("v_bufs.index(stage)", "v_bufs.index(t % V_STAGES)")
assert body.count("mbarrier.arrive(v_empty.index(stage), count=1)") == 1
body = body.replace("mbarrier.arrive(v_empty.index(stage), count=1)", "mbarrier.arrive(v_empty.index(t % V_STAGES), count=1)")
src = src[:c0] + body + src[c1:]
rep("        v_bufs = gl.allocate_shared_memory(gl.float16, [STAGES, TILE, D], q_desc.layout)\n",
    "        v_bufs = gl.allocate_shared_memory(gl.float16, [TOKEN_V_STAGES if TOKEN_ITEMS else STAGES, TILE, D],\n                                           q_desc.layout)\n")
open(out, "w").write(src)

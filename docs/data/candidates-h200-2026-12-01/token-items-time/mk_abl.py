"""Scratch: ablations of a token-kernel module (argv[1]) -> argv[2] with flag argv[3]:
 C: consumer does nothing but the barriers; V: converter does nothing; M: no max (p = exp2(s*scale)); P: no P store."""
import sys
src = open(sys.argv[1]).read(); out = sys.argv[2]; flags = sys.argv[3]
def rep(old, new):
    global src
    assert src.count(old) == 1, old
    src = src.replace(old, new)
if "C" in flags:
    a = src.index("            s = warpgroup_mma(k_bufs.index(stage), q_t, zero_s, use_acc=False, is_async=True)\n")
    b = src.index("            mbarrier.arrive(v_empty.index(stage), count=1)\n", a)
    src = src[:a] + ("            mbarrier.arrive(k_empty.index(stage), count=1)\n"
                     "            mbarrier.wait(v_ready.index(stage), (t // STAGES_) & 1)\n") + src[b:]
if "V" in flags:
    a = src.index("            for c in gl.static_range(TILE_ // ROWS):\n                rows = v8_bufs")
    b = src.index("            fence_async_shared()  # the stores, before the products read them", a)
    src = src[:a] + src[b:]
if "M" in flags:
    rep("            m_new = gl.maximum(m, gl.max(s, axis=0) * scale)\n            m_use = gl.where(m_new == float(\"-inf\"), 0.0, m_new)\n            p = gl.exp2(s * scale - gl.expand_dims(m_use, 0))\n            alpha = gl.exp2(m - m_use)\n",
        "            m_new = m\n            m_use = gl.zeros_like(m)\n            p = gl.exp2(s * scale)\n            alpha = gl.exp2(m_use)\n")
if "P" in flags:
    rep("            p_smem.permute((1, 0)).store(p.to(gl.float16))\n            fence_async_shared()  # the stores, before the product reads them through the async proxy\n            gl.thread_barrier()  # every warp's keys, before the warpgroup's product\n            mbarrier.wait(v_ready",
        "            mbarrier.wait(v_ready")
open(out, "w").write(src)

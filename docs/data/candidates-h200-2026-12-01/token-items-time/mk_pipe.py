"""Scratch: write .fi/wsz_pipe.py: the token consumer with P V of tile j-1 issued behind S of tile j, run under
tile j's softmax (FA3's intra-warpgroup overlap); tile 0 peeled."""
import sys
src = open("kernels/paged_attention/warp_specialized.py").read()
old_start = src.index("        for j in range(n_tiles):\n            t = done + j\n            stage = t % STAGES_\n            mbarrier.wait(k_ready.index(stage), (t // STAGES_) & 1)\n            s = warpgroup_mma(k_bufs.index(stage), q_t")
old_end = src.index("        done += n_tiles\n        # rows of zeros where no key was seen")
new = '''        s_acc = warpgroup_mma_init(zero_s)
        if n_tiles > 0:
            stage = done % STAGES_
            mbarrier.wait(k_ready.index(stage), (done // STAGES_) & 1)
            s_acc = _issue_s(k_bufs.index(stage), q_t, q_rest_t, zero_s, PARTS)
            s = warpgroup_mma_wait(0, deps=(s_acc, ))
            mbarrier.arrive(k_empty.index(stage), count=1)
            p, m, sums, alpha = _token_softmax(s, m, sums, 0, unmasked, seen, scale, s_layout)
            p_smem.permute((1, 0)).store(p.to(gl.float16))
            fence_async_shared()
            gl.thread_barrier()
            if n_tiles > 1:
                stage = (done + 1) % STAGES_
                mbarrier.wait(k_ready.index(stage), ((done + 1) // STAGES_) & 1)
                s_acc = _issue_s(k_bufs.index(stage), q_t, q_rest_t, zero_s, PARTS)
        for j in range(1, n_tiles):
            t = done + j
            stage = t % STAGES_
            before = (t - 1) % STAGES_
            mbarrier.wait(v_ready.index(before), ((t - 1) // STAGES_) & 1)
            pv = warpgroup_mma(v_bufs.index(before).permute((1, 0)), p_smem.permute((1, 0)), acc, is_async=True)
            s = warpgroup_mma_wait(1, deps=(s_acc, ))
            mbarrier.arrive(k_empty.index(stage), count=1)
            p, m, sums, alpha = _token_softmax(s, m, sums, j, unmasked, seen, scale, s_layout)
            acc = warpgroup_mma_wait(0, deps=(pv, ))
            mbarrier.arrive(v_empty.index(before), count=1)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, heads_o), 0)
            p_smem.permute((1, 0)).store(p.to(gl.float16))
            fence_async_shared()  # the stores, before the product reads them through the async proxy
            gl.thread_barrier()  # every warp's keys, before the warpgroup's product
            if j + 1 < n_tiles:
                following = (t + 1) % STAGES_
                mbarrier.wait(k_ready.index(following), ((t + 1) // STAGES_) & 1)
                s_acc = _issue_s(k_bufs.index(following), q_t, q_rest_t, zero_s, PARTS)
        if n_tiles > 0:
            last = (done + n_tiles - 1) % STAGES_
            mbarrier.wait(v_ready.index(last), ((done + n_tiles - 1) // STAGES_) & 1)
            acc = warpgroup_mma(v_bufs.index(last).permute((1, 0)), p_smem.permute((1, 0)), acc)
            mbarrier.arrive(v_empty.index(last), count=1)
'''
helpers = '''

@gluon.jit
def _issue_s(k, q_t, q_rest_t, zero_s, PARTS: gl.constexpr):
    s = warpgroup_mma(k, q_t, zero_s, use_acc=False, is_async=True)
    if PARTS == 2:
        s = warpgroup_mma(k, q_rest_t, s, is_async=True)
    return s


@gluon.jit
def _token_softmax(s, m, sums, j, unmasked, seen, scale, s_layout: gl.constexpr):
    TILE_: gl.constexpr = s.shape[0]
    if j >= unmasked:
        keys = j * TILE_ + gl.arange(0, TILE_, gl.SliceLayout(1, s_layout))
        s = gl.where(gl.expand_dims(keys < seen, 1), s, float("-inf"))
    m_new = gl.maximum(m, gl.max(s, axis=0) * scale)
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
    p = gl.exp2(s * scale - gl.expand_dims(m_use, 0))
    alpha = gl.exp2(m - m_use)
    sums = sums * gl.expand_dims(alpha, 0) + p
    return p, m_new, sums, alpha

'''
src = src[:old_start] + new + src[old_end:]
a = src.index("\n\n@gluon.jit\ndef _consume_tokens(")
src = src[:a] + helpers + src[a + 1:]
src = src.replace("    warpgroup_mma_wait,\n)", "    warpgroup_mma_wait,\n    warpgroup_mma_init,\n)")
open(sys.argv[1] if len(sys.argv) > 1 else ".fi/wsz_pipe.py", "w").write(src)

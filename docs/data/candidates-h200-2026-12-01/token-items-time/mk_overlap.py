"""Lab: write a module copy (argv[1]) of the tree's
warp_specialized.py whose token consumer issues S^T of tile j and P V of tile j-1 together and runs tile j's
softmax and P^T's store under P V (FlashAttention-3's overlap within a warpgroup). No wgmma is in flight across the
loop's back-edge (the pipelined form before carried S^T of the next tile across it, and ptxas serialized every
wgmma: C7514), P^T has two buffers (P V of tile j-1 reads one while tile j's softmax writes the other: with one,
the wait for P V came before the softmax's exp2s in the SASS), tile 0 is peeled and the last P V follows the loop.
Compiled for sm_90 (Triton 3.6.0): no C7514, 0 spills, 4 wgmma waits, 205,188 / 207,236 bytes of shared memory
(q in one / two e4m3 parts). Timed on an H200 (2026-12-01, overlap-check.json, variants-overlap.json): correct,
1.00x the tree's token consumer with q in one e4m3 part, 0.98x with two; not kept. Run from the repository root."""
import sys
src = open("kernels/paged_attention/warp_specialized.py").read()
start = src.index("        for j in range(n_tiles):\n            t = done + j\n            stage = t % STAGES_\n"
                  "            mbarrier.wait(k_ready.index(stage), (t // STAGES_) & 1)\n            s = warpgroup_mma(k_bufs.index(stage), q_t")
end = src.index("        done += n_tiles\n        # rows of zeros where no key was seen")
new = '''        if n_tiles > 0:
            stage = done % STAGES_
            mbarrier.wait(k_ready.index(stage), (done // STAGES_) & 1)
            s = warpgroup_mma(k_bufs.index(stage), q_t, zero_s, use_acc=False, is_async=True)
            if PARTS == 2:
                s = warpgroup_mma(k_bufs.index(stage), q_rest_t, s, is_async=True)
            s = warpgroup_mma_wait(0, deps=(s, ))
            mbarrier.arrive(k_empty.index(stage), count=1)
            if 0 >= unmasked:
                keys = gl.arange(0, TILE_, gl.SliceLayout(1, s_layout))
                s = gl.where(gl.expand_dims(keys < seen, 1), s, float("-inf"))
            m = gl.max(s, axis=0) * scale
            m_use = gl.where(m == float("-inf"), 0.0, m)
            p = gl.exp2(s * scale - gl.expand_dims(m_use, 0))
            sums = p
            p_smem.index(0).permute((1, 0)).store(p.to(gl.float16))
            fence_async_shared()
            gl.thread_barrier()
        for j in range(1, n_tiles):
            t = done + j
            stage = t % STAGES_
            before = (t - 1) % STAGES_
            mbarrier.wait(k_ready.index(stage), (t // STAGES_) & 1)
            s = warpgroup_mma(k_bufs.index(stage), q_t, zero_s, use_acc=False, is_async=True)
            if PARTS == 2:
                s = warpgroup_mma(k_bufs.index(stage), q_rest_t, s, is_async=True)
            mbarrier.wait(v_ready.index(before), ((t - 1) // STAGES_) & 1)
            acc = warpgroup_mma(v_bufs.index(before).permute((1, 0)), p_smem.index((j - 1) % 2).permute((1, 0)),
                                acc, is_async=True)
            s = warpgroup_mma_wait(1, deps=(s, ))  # S^T of tile j; P V of tile j-1 runs on under the softmax
            mbarrier.arrive(k_empty.index(stage), count=1)
            if j >= unmasked:
                keys = j * TILE_ + gl.arange(0, TILE_, gl.SliceLayout(1, s_layout))
                s = gl.where(gl.expand_dims(keys < seen, 1), s, float("-inf"))
            m_new = gl.maximum(m, gl.max(s, axis=0) * scale)
            m_use = gl.where(m_new == float("-inf"), 0.0, m_new)
            p = gl.exp2(s * scale - gl.expand_dims(m_use, 0))
            alpha = gl.exp2(m - m_use)
            sums = sums * gl.expand_dims(alpha, 0) + p
            m = m_new
            p_smem.index(j % 2).permute((1, 0)).store(p.to(gl.float16))  # P V of tile j-1 reads the other
            fence_async_shared()  # the stores, before the product reads them through the async proxy
            gl.thread_barrier()  # every warp's keys, before the warpgroup's product
            acc = warpgroup_mma_wait(0, deps=(acc, ))
            mbarrier.arrive(v_empty.index(before), count=1)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, heads_o), 0)
        if n_tiles > 0:
            t = done + n_tiles - 1
            last = t % STAGES_
            mbarrier.wait(v_ready.index(last), (t // STAGES_) & 1)
            acc = warpgroup_mma(v_bufs.index(last).permute((1, 0)),
                                p_smem.index((n_tiles - 1) % 2).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=(acc, ))
            mbarrier.arrive(v_empty.index(last), count=1)
'''
src = src[:start] + new + src[end:]
old_alloc = "    p_smem = gl.allocate_shared_memory(gl.float16, [ROWS, TILE_], p_layout)\n"
assert src.count(old_alloc) == 1
src = src.replace(old_alloc, "    p_smem = gl.allocate_shared_memory(gl.float16, [2, ROWS, TILE_], p_layout)\n")
open(sys.argv[1], "w").write(src)

"""Scratch: write a variant of warp_specialized.py with the loader's latency fixes:
 T: no ticket drawn where the grid covers every item; S: the start's dependent reads prefetched (seq_lens and the
 table row at the guessed sequence, beside cu_seqlens); A: the table prefetched AHEAD ids ahead in the tile loop.
python .fi/mk_pf.py OUT FLAGS (subset of TSA) [AHEAD]"""
import sys
out, flags = sys.argv[1], sys.argv[2]
ahead = int(sys.argv[3]) if len(sys.argv) > 3 else 64
src = open(sys.argv[4] if len(sys.argv) > 4 else "kernels/paged_attention/warp_specialized.py").read()
def rep(old, new):
    global src
    assert src.count(old) == 1, old
    src = src.replace(old, new)
rep("\n\n@gluon.jit\ndef locate(", '''

@gluon.jit
def _prefetch(ptr):
    """A prefetch of ptr's line into L1, no wait."""
    gl.inline_asm_elementwise("prefetch.global.L1 [$1]; mov.u32 $0, 0;", "=r,l", [ptr], dtype=gl.int32,
                              is_pure=False, pack=1)


@gluon.jit
def locate(''')
if "T" in flags:
    rep("    if step == gl.maximum(n_tiles - STAGES_, -1) + 1:\n",
        "    if (step == gl.maximum(n_tiles - STAGES_, -1) + 1) & (gl.num_programs(0) < drawn_bound(work)):\n")
    rep("\n\n@gluon.jit\ndef _leave(work):", '''

@gluon.jit
def drawn_bound(work):
    return gl.maximum(work[5] * (work[0] // work[1]), work[6] * work[0])


@gluon.jit
def _leave(work):''')
if "S" in flags:
    rep("    guess = gl.maximum(gl.minimum(token, num_seqs - 1), 0)\n",
        "    guess = gl.maximum(gl.minimum(token, num_seqs - 1), 0)\n"
        "    _prefetch(seq_lens_ptr + guess)\n"
        "    _prefetch(block_table_ptr + guess.to(gl.int64) * block_table_stride)\n")
if "A" in flags:
    rep('''            for j in range(n_tiles):
                following = _ticket(work, n_tiles, j + 1, following, STAGES_)
                _copy_token_tile(''', '''            for j in range(n_tiles):
                following = _ticket(work, n_tiles, j + 1, following, STAGES_)
                _prefetch(table + gl.minimum(j * (TILE_ // BLOCK) + %d, work[9] - 1))
                _copy_token_tile(''' % ahead)
if "R" in flags:
    rep("        drawn = gl.num_programs(0) + gl.atomic_add(tickets_ptr, 1)\n",
        "        drawn = gl.num_programs(0) + gl.atomic_add(tickets_ptr, 1, sem=\"relaxed\")\n")
open(out, "w").write(src)
print("wrote", out)

"""Where do the pairs go wrong on the GPU? The failing 64-row case and its neighbours, max |out - ref|."""
import sys, json, itertools
sys.path.insert(0, "tests")
import torch
from grid_cases import make_spec
from kernels import VARIANTS
from kernels.batch import build_batch
from kernels.inputs import OCP_E4M3
from kernels.paged_attention import planning
from kernels.paged_attention.heuristics import Config
from kernels.reference import paged_attention_reference
planning.PAIRS_MAX_BLOCK_M = 1024  # lab: let the pairs reach every Q-block
C = lambda m, t, w=4, s=2, **k: Config(m, t, 1, num_warps=w, num_stages=s, **k)
rows = []
cases = [
    ("a m64 t128 w4 s2 b32 (the tree's)", C(64, 128, v_pairs=True), 32, 64, "mixed_small"),
    ("acc even only: v pairs but odd half dropped", None, 32, 64, "mixed_small"),
    ("control: no pairs", C(64, 128), 32, 64, "mixed_small"),
    ("k only", C(64, 128, k_pairs=True), 32, 64, "mixed_small"),
    ("block 16", C(64, 128, v_pairs=True), 16, 64, "mixed_small"),
    ("tile 64", C(64, 64, v_pairs=True), 32, 64, "mixed_small"),
    ("tile 32", C(64, 32, v_pairs=True), 32, 64, "mixed_small"),
    ("8 warps", C(64, 128, w=8, v_pairs=True), 32, 64, "mixed_small"),
    ("3 stages", C(64, 128, s=3, v_pairs=True), 32, 64, "mixed_small"),
    ("1 stage", C(64, 128, s=1, v_pairs=True), 32, 64, "mixed_small"),
    ("m128 w8", C(128, 128, w=8, v_pairs=True), 32, 64, "mixed_small"),
    ("m32 (control)", C(32, 128, v_pairs=True), 32, 64, "mixed_small"),
    ("head 128", C(64, 128, v_pairs=True), 32, 128, "mixed_small"),
    ("prefill only", C(64, 128, v_pairs=True), 32, 64, "chunked_33_97"),
    ("decode only", C(64, 128, v_pairs=True), 32, 64, "decode_1328"),
    ("block-vector tiles", C(64, 128, v_pairs=True, block_vector=True), 16, 64, "mixed_small"),
    ("m64 tile 64 block 16", C(64, 64, v_pairs=True), 16, 64, "mixed_small"),
    ("m64 tile 64 no pairs (control)", C(64, 64), 32, 64, "mixed_small"),
]
cases = [c for c in cases if c[1] is not None]
only = [int(a) for a in sys.argv[1:]]
for idx, (label, cfg, block, head, case) in enumerate(cases):
    if only and idx not in only:
        continue
    spec = make_spec("gqa4", head, block, case, "float16", "fp8_kv", seed=7)
    b = build_batch(spec, "cuda", poison=True, fp8_dtype=OCP_E4M3)
    out = b.new_output()
    _, L = VARIANTS["static_grid"].plan(*b.args(), out=out, config=cfg, **b.options)
    cx = L[0].constexprs
    VARIANTS["static_grid"](*b.args(), out=out, config=cfg, **b.options)
    ref = paged_attention_reference(*b.args(), **b.options).float()
    err = (out.float() - ref).abs()
    bad = (err > 3e-3 + 3e-3 * ref.abs())
    where = bad.nonzero()
    row = dict(idx=idx, label=label, v=cx["V_PAIRS"], k=cx["K_PAIRS"], max_err=float(err.nan_to_num(1e9).max()),
               bad_frac=float(bad.float().mean()), tokens=sorted(set(where[:, 0].tolist()))[:30],
               dims=sorted(set(where[:, 2].tolist()))[:70])
    rows.append(row)
    print(json.dumps(row), flush=True)

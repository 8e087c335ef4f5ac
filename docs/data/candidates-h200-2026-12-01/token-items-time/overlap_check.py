"""Lab (GPU, sm_90): a module copy's token items (argv[1], e.g. from mk_overlap.py) against the fp32 reference on
poisoned outputs, over the shapes of tests/kernels/test_warp_specialized.py's token cases (groups of 4, 5, 7, 8
and 16 heads, every block size the kernel takes, a context of one key, partial blocks, several queries a
sequence), q in one and in two e4m3 parts; writes $OUT/overlap_check.json and exits 1 on any mismatch."""
import importlib.util, json, os, sys
import torch
from kernels import VARIANTS
from kernels.batch import BatchSpec, build_batch
from kernels.inputs import OCP_E4M3
from kernels.paged_attention import planning, warp_specialized as ws
from kernels.paged_attention.heuristics import Config
from kernels.reference import paged_attention_reference
from perf.measure import check

spec_ = importlib.util.spec_from_file_location("ws_candidate", sys.argv[1])
mod = importlib.util.module_from_spec(spec_)
spec_.loader.exec_module(mod)
ws.ws_prefill_kernel = mod.ws_prefill_kernel  # the planner launches the module's attribute
CASES = [(7, 16, "bfloat16", (1, 1, 1), (300, 1, 4097)), (5, 32, "float16", (1, 1, 1, 1), (129, 2000, 17, 640)),
         (4, 64, "bfloat16", (1, 3, 1), (1000, 40, 128)), (8, 128, "bfloat16", (1, 1), (255, 3000)),
         (16, 16, "bfloat16", (1, 1, 1), (2048, 5, 129)), (7, 16, "float16", (2, 1, 4), (700, 33, 130)),
         (7, 16, "bfloat16", (1,) * 32, (4096,) * 32)]
rows, failed = [], 0
for group, block, dtype, query_lens, kv_lens in CASES:
    for parts in (1, 2):
        config = Config(128, 128, 1, num_warps=4, num_stages=2, warp_specialized=True, ws_token_items=True,
                        qk_e4m3=parts == 1)
        spec = BatchSpec(query_lens, kv_lens, num_q_heads=4 * group if len(kv_lens) == 32 else 2 * group,
                         num_kv_heads=4 if len(kv_lens) == 32 else 2, head_size=128, block_size=block, dtype=dtype,
                         fp8_kv=True, seed=1000 + group + block)
        batch = build_batch(spec, "cuda", poison=True, fp8_dtype=OCP_E4M3)
        planning.release_buffers()
        out = batch.new_output()  # NaN: an unwritten element fails
        _, planned = VARIANTS["static_grid"].plan(*batch.args(), out=out, config=config, **batch.options)
        launches = [launch.config() for launch in planned]
        q, *rest = batch.args()
        if check.rounds_q_to_e4m3(launches):
            q = check.e4m3_rounded(q, batch.k_cache.dtype)
        expected = paged_attention_reference(q, *rest, **batch.options)
        atol, rtol = check.tolerance(batch.q.dtype, launches)
        VARIANTS["static_grid"](*batch.args(), out=out, config=config, **batch.options)
        torch.cuda.synchronize()
        err = (out.float() - expected.float()).abs()
        ok = bool(torch.isfinite(out.float()).all()) and bool((err <= atol + rtol * expected.float().abs()).all())
        failed += not ok
        rows.append(dict(group=group, block=block, dtype=dtype, queries=list(query_lens)[:8], kv=list(kv_lens)[:8],
                         q_parts=parts, kernels=[p.name for p in planned], max_error=float(err.nan_to_num(1e9).max()),
                         atol=atol, rtol=rtol, ok=ok))
        print(json.dumps(rows[-1]), flush=True)
json.dump({"gpu": torch.cuda.get_device_name(), "module": sys.argv[1], "failed": failed, "rows": rows},
          open(os.path.join(os.environ.get("OUT", "/tmp"), "overlap_check.json"), "w"), indent=1)
sys.exit(1 if failed else 0)

"""Compile every form of the page probe for sm_90 on the CPU (ptxas's spills and stack, TMA copies)."""
import contextlib, importlib.util, io, os, re, sys
from types import SimpleNamespace
import torch, triton
sys.path.insert(0, os.getcwd())
os.environ.update(TRITON_ALWAYS_COMPILE="1", TRITON_DUMP_PTXAS_LOG="1")
from perf.static import plan
from perf.thresholds import load_thresholds
SM90 = next(t for t in plan.load_targets(load_thresholds()) if t.name == "sm_90")
spec = importlib.util.spec_from_file_location("probe", os.path.join(os.path.dirname(os.path.abspath(__file__)), "page-stream-probe.py"))
probe = importlib.util.module_from_spec(spec); spec.loader.exec_module(probe)
for heads in (4, 8):
    for block in (16, 32):
        nb = 64
        k = torch.zeros(nb, block, heads, 128, dtype=torch.float8_e4m3fn)
        table = torch.zeros(4, 8, dtype=torch.int32)
        out = torch.zeros(16)
        for mode in probe.MODES:
            for stages in (3, 4):
                r, tiles = probe.form(mode, heads, block, 4096)
                kd, vd = probe.descs(k, k, mode, r)
                launch = SimpleNamespace(kernel=probe.page_kernel, num_warps=4, num_stages=3, vendor_options={},
                    args=dict(k_desc=kd, v_desc=vd, table_ptr=table, table_stride=8, out_ptr=out, kv_heads=heads,
                              keys=4096, block_size=block, tiles=tiles),
                    constexprs=dict(STAGES=stages, MODE=probe.MODES[mode], HEADS=probe.together(mode, heads)))
                try:
                    sig, cx, attrs, options = plan.bind(launch, SM90)
                    log = io.StringIO()
                    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                        c = triton.compile(plan.source(launch.kernel, sig, cx, attrs), target=SM90.gpu_target(),
                                           options=options.__dict__)
                    ptx = c.asm["ptx"]
                    spills = re.findall(r"(\d+) bytes spill stores", log.getvalue())
                    print(f"heads {heads} block {block} {mode} stages {stages}: shared {c.metadata.shared} B, "
                          f"tma {ptx.count('cp.async.bulk.tensor')}, spill stores {spills}", flush=True)
                except Exception as e:
                    import traceback; print(f"heads {heads} block {block} {mode} stages {stages}: FAILED"); traceback.print_exc(); sys.exit(1)

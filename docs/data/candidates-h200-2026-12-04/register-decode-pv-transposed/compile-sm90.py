"""Compile regt_decode's forms (W:QKS:DEPTH:EARLY; a negative DEPTH: regt_decode_ring with -DEPTH slots; QKS 2:
regt_decode_ring with DEPTH slots, its copies in inline PTX) for sm_90 on the CPU: registers, spills, SASS
instruction counts (the whole kernel, and its steps' loop). Ran as `.fi/regt/compile.py` beside the probe as
`probe.py` (runs from this folder too); output: compile-sm90.txt."""
import contextlib
import importlib.util
import io
import os
import re
import subprocess
import sys
import traceback
from collections import Counter
from types import SimpleNamespace

import torch
import triton

sys.path.insert(0, os.getcwd())
os.environ.update(TRITON_ALWAYS_COMPILE="1", TRITON_DUMP_PTXAS_LOG="1")
from perf.static import plan
from perf.thresholds import load_thresholds

here = os.path.dirname(os.path.abspath(__file__))
_path = next(os.path.join(here, f) for f in ("probe.py", "regt-decode-probe.py")
             if os.path.exists(os.path.join(here, f)))
_spec = importlib.util.spec_from_file_location("probe", _path)
probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(probe)
SM90 = next(t for t in plan.load_targets(load_thresholds()) if t.name == "sm_90")
forms = [tuple(int(x) for x in f.split(":")) for f in (sys.argv[1:] or ["8:0:1:1", "8:1:1:1"])]
for W, qks, depth, early in forms:
    for group, block in ((7, 16),):
        k = torch.zeros(64, block, 4, 128, dtype=torch.float8_e4m3fn)
        q = torch.zeros(4, 28, 128, dtype=torch.bfloat16)
        launch = SimpleNamespace(kernel=probe.regt_decode_ring if qks == 2 or depth < 0 else probe.regt_decode,
                                 num_warps=W,
                                 num_stages=1, vendor_options={},
            args=dict(q_ptr=q, k_ptr=k, v_ptr=k, table_ptr=torch.zeros(4, 8, dtype=torch.int32),
                      lens_ptr=torch.zeros(4, dtype=torch.int32), out_ptr=q, s_qt=28 * 128, s_qh=128,
                      s_kb=block * 512, s_kp=512, s_kh=128, s_bt=8, s_ot=28 * 128, s_oh=128, kv_heads=4,
                      qk_scale=0.1, v_scale=1.0),
            constexprs=dict(GROUP=group, BLOCK=block, W=W, R=depth, ASM=True) if qks == 2 else
            dict(GROUP=group, BLOCK=block, W=W, R=-depth, ASM=False) if depth < 0 else
            dict(GROUP=group, BLOCK=block, W=W, QKS=qks, DEPTH=depth, EARLY=early))
        sig, cx, attrs, options = plan.bind(launch, SM90)
        log = io.StringIO()
        name = f"W{W}-qks{qks}-d{depth}-e{early}"
        try:
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                c = triton.compile(plan.source(launch.kernel, sig, cx, attrs), target=SM90.gpu_target(),
                                   options=options.__dict__)
        except Exception as e:
            print(name, "FAILED", type(e).__name__, traceback.format_exc(), flush=True)
            continue
        ptxlog = log.getvalue()
        regs = re.findall(r"Used (\d+) registers", ptxlog)
        spills = re.findall(r"(\d+) bytes spill stores", ptxlog)
        ptx = c.asm["ptx"]
        open(f"/tmp/regt-{name}.ptx", "w").write(ptx)
        open(f"/tmp/regt-{name}.cubin", "wb").write(c.asm["cubin"])
        cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
        sass = subprocess.run([cuobjdump, "-sass", f"/tmp/regt-{name}.cubin"], capture_output=True, text=True).stdout
        open(f"/tmp/regt-{name}.sass", "w").write(sass)
        ops = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", sass)
        cnt = Counter(o.split(".")[0] for o in ops)
        # the steps' loop: the longest backward branch (its instructions, from its target to the branch)
        loops = [(int(at, 16) - int(to, 16)) // 16 + 1 for at, to in
                 re.findall(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?P\w+\s+)?BRA (?:`\(\.L_x_\d+\) )?0x([0-9a-f]+)", sass)
                 if int(to, 16) < int(at, 16)]
        loop = max(loops) if loops else 0
        print(f"{name}: regs {regs} spills {spills} shared {c.metadata.shared} loop {loop} "
              f"({loop / (1 if qks == 2 or depth < 0 else depth + 1):.0f} a step of 16 keys) sass {len(ops)} "
              + " ".join(f"{k} {v}" for k, v in cnt.most_common(18)), flush=True)

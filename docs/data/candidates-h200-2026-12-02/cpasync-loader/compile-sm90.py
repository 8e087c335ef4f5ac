"""Compile the cp.async stream probe for sm_90 on the CPU: registers, spills, shared memory."""
import sys, os
sys.path.insert(0, ".fi/cpasync")
import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource
import probe

fn = probe.cp_stream_kernel
names = fn.arg_names
sig = dict(zip(names, ["*fp8e4nv", "*fp8e4nv", "*i32", "i32", "*fp32", "i32", "i32", "i32"] + ["constexpr"] * 8))
attrs = {(i,): [["tt.divisibility", 16]] for i in (0, 1, 2, 4)}
for block, whole in ((16, 1), (32, 1)):
    for lw, stages, regs in ((2, 4, 128), (2, 4, 168), (4, 4, 96), (4, 4, 128), (1, 4, 200), (1, 4, 248)):
        for check in (0,):
            cx = dict(WHOLE=whole, TILE=128, D=128, STAGES=stages, LW=lw, REGS=regs, TOUCH=1, CHECK=check)
            src = GluonASTSource(fn, sig, {(names.index(n),): v for n, v in cx.items()}, attrs)
            try:
                c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
                md = c.metadata
                print(block, whole, lw, stages, regs, check, "regs", md.n_regs if hasattr(md, "n_regs") else "?",
                      "spills", getattr(md, "n_spills", "?"), "shared", md.shared, flush=True)
                if block == 16 and lw == 2 and check == 0 and whole:
                    open("/tmp/cp_ptx.txt", "w").write(c.asm["ptx"])
            except Exception as e:
                print(block, whole, lw, stages, regs, check, "ERROR", block, whole, str(e)[-3000:].replace(chr(10), " | ")[-900:], flush=True)

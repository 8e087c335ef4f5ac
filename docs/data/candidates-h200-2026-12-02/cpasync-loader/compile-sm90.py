"""Compile the cp.async stream probe beside this file for sm_90 on the CPU: every loader it timed
(CONFIGS at 3, 4 and 6 stages, V touched, and with K checked too; the block size is a runtime
argument, so one compile serves blocks of 16 and 32), with ptxas's report of spills and stack.
Run from the repository root; prints a line each."""
import importlib.util
import os
import re

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon._runtime import GluonASTSource

os.environ.update(TRITON_ALWAYS_COMPILE="1", TRITON_DUMP_PTXAS_LOG="1")
spec = importlib.util.spec_from_file_location(
    "probe", os.path.join(os.path.dirname(os.path.abspath(__file__)), "cpasync-stream-probe.py"))
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)

fn = probe.cp_stream_kernel
names = fn.arg_names
signature = dict(zip(names, ["*fp8e4nv", "*fp8e4nv", "*i32", "i32", "*fp32", "i32", "i32", "i32"] + ["constexpr"] * 8))
attrs = {(i,): [["tt.divisibility", 16]] for i in (0, 1, 2, 4)}
for lw, regs, whole in probe.CONFIGS:
    for stages in (3, 4, 6):
        for check in (0, 1):
            given = dict(WHOLE=whole, TILE=128, D=128, STAGES=stages, LW=lw, REGS=regs, TOUCH=1, CHECK=check)
            src = GluonASTSource(fn, signature, {(names.index(n),): v for n, v in given.items()}, attrs)
            compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
            ptx = compiled.asm["ptx"]
            copies = len(re.findall(r"cp.async.cg.shared.global", ptx))
            print(f"loader warps {lw}, registers {regs}, whole {whole}, stages {stages}, K checked {check}: "
                  f"shared {compiled.metadata.shared} B, cp.async {copies}, "
                  f"noinc arrives {ptx.count('cp.async.mbarrier.arrive.noinc')}", flush=True)

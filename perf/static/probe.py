"""Can this Triton compile for a target at all? One tiny kernel, compiled before the real ones.

A target the installed Triton cannot compile for (a ptxas without that sm_ architecture, an
LLVM without that gfx processor) would fail every kernel with the same message, or abort
the compiling process. So each target is probed once, in a process of its own, with a
kernel that needs what the attention kernels need (loads, `tl.dot` on fp16 tiles, stores);
a target whose probe fails is reported with the compiler's own reason ("target X: Triton
<version> cannot compile for it: <reason>", perf.verdicts.target_finding) and nothing else
is compiled for it. Measured with Triton 3.6.0 on a CPU (2026-11-22): sm_100, sm_103,
sm_120 and gfx950 compile; sm_110 fails in ptxas-blackwell ("Value 'sm_110a' is not
defined"); gfx9999 fails in MLIR ("unsupported target"); sm_99 aborts the process in LLVM
("Cannot select: intrinsic ...ldmatrix..."), which a probe in the gate's own process
would not survive.

`python -m perf.static.probe '{"backend": "hip", "arch": "gfx950", "warp_size": 64}'` is
the probe's process: it prints one JSON line. Import this module only where Triton's
interpreter is off (under TRITON_INTERPRET=1 `triton.jit` makes an interpreted function).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys

import triton
import triton.language as tl

from perf.process import child_env

PROBE_TIMEOUT_S = 300  # one tiny kernel compiles in 1-5 s on a 2-core CPU; unmeasured margin
# The specialization compiled: fp16 tiles of 16 x 16 (tl.dot's minimum on every backend,
# kernels/paged_attention/heuristics.py MIN_TILE), an fp32 result.
SIGNATURE = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "BLOCK": "constexpr"}
CONSTEXPRS = {"BLOCK": 16}


@triton.jit
def probe_kernel(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr):
    """c = a @ b for one BLOCK x BLOCK tile: loads, an MMA, a store."""
    offsets = tl.arange(0, BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    a = tl.load(a_ptr + offsets)
    b = tl.load(b_ptr + offsets)
    tl.store(c_ptr + offsets, tl.dot(a, b))


def source():
    from triton.compiler import ASTSource

    return ASTSource(probe_kernel, SIGNATURE, CONSTEXPRS)


def cache_key(target) -> str:
    """Triton's compile key of the probe for `target` (its Triton build, ptxas, options)."""
    from triton.compiler import make_backend

    from perf.static import plan

    options = make_backend(target.gpu_target()).parse_options({})
    return plan.cache_key(_Launch, target, SIGNATURE, CONSTEXPRS, {}, options)


class _Launch:  # what plan.cache_key reads of a launch
    kernel = probe_kernel


# The line that says why, most specific first: ptxas ("ptxas-blackwell fatal : Value
# 'sm_110a' is not defined for option 'gpu-name'"), LLVM's own abort ("LLVM ERROR: Cannot
# select: ..."), an MLIR diagnostic ("probe.py:37:0: error: unsupported target: 'gfx9999'").
_REASONS = (re.compile(r"ptxas\S* fatal\s*:\s*(.+)"), re.compile(r"LLVM ERROR: (.+)"),
            re.compile(r":\d+:\d+: error: (.+)"))


def reason(kind: str, text: str) -> str:
    """One line: what failed (an exception type, or how the process died) and the
    compiler's own words for why."""
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    for pattern in _REASONS:
        for line in lines:
            m = pattern.search(line)
            if m:
                return f"{kind}: {m.group(1)}"[:400]
    return f"{kind}: {lines[0] if lines else 'no message'}"[:400]


def start(target) -> subprocess.Popen:
    """The probe's process for `target` (perf.static.plan.Target), started."""
    spec = json.dumps({"backend": target.backend, "arch": target.arch, "warp_size": target.warp_size})
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = child_env(root, drop=("TRITON_INTERPRET",))
    # its own process group: an interrupt of the gate stops it (perf.process.stop_group)
    return subprocess.Popen([sys.executable, "-m", "perf.static.probe", spec], env=env, cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def result(process: subprocess.Popen) -> dict:
    """{"status": "ok"} or {"status": "error", "error": why}, when the probe's process ends."""
    try:
        out, err = process.communicate(timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        return {"status": "error", "error": f"the probe took over {PROBE_TIMEOUT_S} s to compile"}
    lines = out.strip().splitlines()
    try:
        said = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        said = None
    if process.returncode == 0 and said is not None:
        if said["ok"]:
            return {"status": "ok", "error": ""}
        return {"status": "error", "error": reason(said["type"], f"{said['message']}\n{err}")}
    code = process.returncode
    died = f"the compiler died ({signal.Signals(-code).name})" if code < 0 else f"the compiler exited {code}"
    return {"status": "error", "error": reason(died, err)}


def main(spec: str) -> None:
    """Compile the probe for the target `spec` names; print one JSON line saying how it went."""
    from triton.backends.compiler import GPUTarget

    t = json.loads(spec)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # ptxas logs, when asked for
            triton.compile(source(), target=GPUTarget(t["backend"], t["arch"], t["warp_size"]))
        said = {"ok": True}
    except Exception as e:  # the compiler's verdict on the target
        said = {"ok": False, "type": type(e).__name__, "message": str(e)[-4000:]}
    print(json.dumps(said), flush=True)


if __name__ == "__main__":  # a probe's process (`start`): its parent reports an interrupt
    from perf.errors import ConfigError
    from perf.process import entry

    def _probe(argv: list[str]) -> None:
        if len(argv) != 1:
            raise ConfigError("usage: python -m perf.static.probe SPEC, one JSON target such as "
                              '\'{"backend": "hip", "arch": "gfx950", "warp_size": 64}\' '
                              "(perf/static/build.py starts it)")
        main(argv[0])

    entry(_probe, internal=True)
